"""How fast the SQLite store is where the coordinator leans on it.

Every agent report is one commit of one machine plus one event, each a durable
(synchronous=FULL) write; every reconcile pass lists a cluster's machines; heartbeats are
written in flushes, each touching the last_seen of the machines heard from since the last;
every long-poll starts with one lookup of its machine's version.

    .venv/bin/python bench/store_sqlite.py [--dir DIR] [--commits N] [--quick]

DIR decides the filesystem, and so the fsync cost: use the coordinator's data disk.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' builders

from coordinator.domain.records import Event
from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import fleet_machine


async def commits_per_second(store: SQLiteStore, count: int) -> float:
    machine = fleet_machine(0)
    started = time.perf_counter()
    for n in range(count):
        machine = replace(machine, generation=n + 1)
        await store.commit([machine], [Event(time=float(n), cluster="bench", kind="item",
                                             message="kubelet succeeded", machine=machine.id,
                                             data={"attempt": 1, "exit_code": 0})])
    return count / (time.perf_counter() - started)


async def list_seconds(store: SQLiteStore, machines: int) -> tuple[float, float]:
    """Median wall and CPU seconds of five listings of a cluster of that many machines (CPU
    time too, because on a busy host wall time mostly measures the neighbours)."""
    existing = len(await store.list_machines("bench"))
    for start in range(existing, machines, 500):
        await store.commit([fleet_machine(i) for i in range(start, min(start + 500, machines))])
    wall, cpu = [], []
    for _ in range(5):
        started, started_cpu = time.perf_counter(), time.process_time()
        listed = await store.list_machines("bench")
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    assert len(listed) == machines
    return statistics.median(wall), statistics.median(cpu)


async def touch_seconds(store: SQLiteStore, machines: int, batch: int = 1000) -> float:
    """Median wall seconds of ten heartbeat flushes (touch_machines) of `batch` of the
    cluster's machines: what a heartbeat costs the store (at 10,000 agents heartbeating every
    10 s, a flush each second touches about 1,000)."""
    ids = [fleet_machine(i).id for i in range(machines)]
    wall = []
    for n in range(10):
        seen = {i: 1000.0 + n for i in ids[n * batch % machines:][:batch]}
        started = time.perf_counter()
        await store.touch_machines(seen)
        wall.append(time.perf_counter() - started)
    return statistics.median(wall)


async def lookup_seconds(store: SQLiteStore, machines: int) -> float:
    """Median wall seconds of one machine_version, over one lookup of each of the cluster's
    machines: what every long-poll reads before it waits (a generation and the store's
    epoch, domain/assignments/etags.py)."""
    wall = []
    for i in range(machines):
        machine_id = fleet_machine(i).id
        started = time.perf_counter()
        await store.machine_version(machine_id)
        wall.append(time.perf_counter() - started)
    return statistics.median(wall)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database")
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--machines", type=int, nargs="+", default=[1_000, 10_000],
                        help="cluster sizes to list")
    parser.add_argument("--quick", action="store_true", help="50 commits, 200 and 500 machines")
    args = parser.parse_args()
    if args.quick:
        args.commits, args.machines = 50, [200, 500]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        await store.open()
        try:
            rate = await commits_per_second(store, args.commits)
            print(f"commit (1 machine + 1 event, synchronous=FULL): {rate:,.0f} commits/s "
                  f"({1000 / rate:.2f} ms each, {args.commits} commits)")
            for machines in args.machines:
                wall, cpu = await list_seconds(store, machines)
                print(f"list_machines, {machines:,} machines: {wall * 1000:,.0f} ms "
                      f"({cpu * 1000:,.0f} ms CPU)")
                print(f"touch_machines (a heartbeat flush), up to 1,000 of {machines:,} machines: "
                      f"{await touch_seconds(store, machines) * 1000:,.1f} ms")
                print(f"machine_version (a long-poll's lookup), {machines:,} machines: "
                      f"{await lookup_seconds(store, machines) * 1e6:,.1f} µs")
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
