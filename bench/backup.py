"""How long a backup and a restore take for a fleet and its history, and whether agents'
reports wait for a backup: a SQLite store of N machines and E events is snapshotted and
archived (what POST /v1/backup does) while a writer commits one machine and one event at a
time (an agent's report), then the archive is restored into a new store.

    .venv/bin/python bench/backup.py [--machines N] [--events E] [--dir DIR] [--quick]
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
from coordinator.service import snapshot
from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import TEST_CIPHER, fleet_machine

BATCH = 500


def report(n: int, machine_id: str = "machine-00000") -> Event:
    return Event(time=float(n), cluster="bench", kind="item", message="kubelet succeeded",
                 machine=machine_id, hostname="node-00000", data={"attempt": 1, "exit_code": 0})


async def fill(store: SQLiteStore, machines: int, events: int) -> None:
    for start in range(0, machines, BATCH):
        await store.commit([fleet_machine(i) for i in range(start, min(start + BATCH, machines))])
    for start in range(0, events, BATCH):
        await store.commit(events=[report(n) for n in range(start, min(start + BATCH, events))])


async def commit_latencies(store: SQLiteStore, until: asyncio.Event) -> list[float]:
    """Seconds of each report's commit, one after another until `until` is set."""
    machine, took = fleet_machine(0), []
    while not until.is_set():
        machine = replace(machine, generation=machine.generation + 1)
        started = time.perf_counter()
        await store.commit([machine], [report(len(took))])
        took.append(time.perf_counter() - started)
    return took


async def reports_for(store: SQLiteStore, seconds: float) -> list[float]:
    done = asyncio.Event()
    writer = asyncio.create_task(commit_latencies(store, done))
    await asyncio.sleep(seconds)
    done.set()
    return await writer


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    parser.add_argument("--quick", action="store_true", help="1,000 machines, 5,000 events")
    args = parser.parse_args()
    machines, events = (1_000, 5_000) if args.quick else (args.machines, args.events)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data_dir = Path(tmp)
        store = SQLiteStore(data_dir / "coordinator.db", TEST_CIPHER)
        await store.open()
        await fill(store, machines, events)
        quiet = await reports_for(store, 1.0)

        done = asyncio.Event()
        writer = asyncio.create_task(commit_latencies(store, done))
        started = time.perf_counter()
        taken = await snapshot.take(store, data_dir)
        took_export = time.perf_counter() - started
        data = await asyncio.to_thread(snapshot.to_bytes, taken)
        took_backup = time.perf_counter() - started
        done.set()
        during = await writer
        await store.close()

        started = time.perf_counter()
        target = SQLiteStore(data_dir / "restored" / "coordinator.db")
        (data_dir / "restored").mkdir()
        await target.open()
        await snapshot.restore(target, data_dir / "restored", snapshot.from_bytes(data))
        took_restore = time.perf_counter() - started
        assert len(await target.list_machines()) == machines
        await target.close()

    print(f"backup of {machines} machines and {events + len(quiet) + len(during)} events: "
          f"{took_backup:.2f} s ({took_export:.2f} s reading the store in one transaction), "
          f"archive {len(data) / 2**20:.1f} MiB")
    print(f"restore into a new SQLite store: {took_restore:.2f} s")
    print(f"report commits during the backup: {len(during)}, p99 {p99(during) * 1000:.1f} ms "
          f"(without a backup: p99 {p99(quiet) * 1000:.1f} ms)")


if __name__ == "__main__":
    asyncio.run(main())
