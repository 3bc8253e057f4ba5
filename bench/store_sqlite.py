"""How fast the SQLite store is where the coordinator leans on it.

Every agent report is one commit of one machine plus one event, each a durable
(synchronous=FULL) write; every reconcile pass lists a cluster's machines.

    .venv/bin/python bench/store_sqlite.py [--dir DIR] [--commits N]

DIR decides the filesystem, and so the fsync cost: use the coordinator's data disk.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from coordinator.domain.model import ItemProgress, Machine, MachineState
from coordinator.domain.records import Event
from coordinator.store.sqlite import SQLiteStore


def sample_machine(index: int) -> Machine:
    """A machine with documents the size an agent sends: facts, a 13-check precheck report."""
    checks = [{"name": f"check-{c}", "severity": "hard", "status": "pass", "message": "ok",
               "remedy": "", "data": {"value": c}, "duration": 0.01, "ignored": False}
              for c in range(13)]
    return Machine(
        id=f"machine-{index:05d}", cluster="bench", hostname=f"node-{index:05d}",
        ip=f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
        state=MachineState.READY, role="worker", approved=True,
        facts={"cpus": 8, "memory_bytes": 32 << 30, "kernel": "6.1.0-18-amd64",
               "os": {"id": "debian", "version_id": "12"}, "interfaces": ["eth0", "eth1"]},
        precheck={"schema": "nodeagent.precheck/v1", "hostname": f"node-{index:05d}",
                  "role": "worker", "ok": True, "checks": checks},
        applied=frozenset(f"{index:08d}{item:024d}" for item in range(20)),
        progress=ItemProgress(item="kubelet", attempt=1, status="succeeded", updated_at=1.0),
        credential_hash=f"{index:064d}",
    )


async def commits_per_second(store: SQLiteStore, count: int) -> float:
    machine = sample_machine(0)
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
        await store.commit([sample_machine(i) for i in range(start, min(start + 500, machines))])
    wall, cpu = [], []
    for _ in range(5):
        started, started_cpu = time.perf_counter(), time.process_time()
        listed = await store.list_machines("bench")
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    assert len(listed) == machines
    return statistics.median(wall), statistics.median(cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database")
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        await store.open()
        try:
            rate = await commits_per_second(store, args.commits)
            print(f"commit (1 machine + 1 event, synchronous=FULL): {rate:,.0f} commits/s "
                  f"({1000 / rate:.2f} ms each, {args.commits} commits)")
            for machines in (1_000, 10_000):
                wall, cpu = await list_seconds(store, machines)
                print(f"list_machines, {machines:,} machines: {wall * 1000:,.0f} ms "
                      f"({cpu * 1000:,.0f} ms CPU)")
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
