"""What one reconcile pass costs on a large settled fleet when k machines changed.

The store (SQLite, on disk) is seeded directly with N Ready machines (3 managers, the rest
workers; documents the size agents send) and a pool of unapproved Pending machines. After
the coordinator's first pass (which loads the whole cluster once, as after a start), each
round approves k Pending machines through the coordinator (the operator's path: it marks
them changed) and times the pass that moves them to Prepare. A pass with nothing changed
(the once-a-second tick) is timed too.

    .venv/bin/python bench/reconcile.py [--fleet 1000 10000 50000] [--changed 0 1 10 100] [--quick]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

from coordinator.domain.model import MachineState
from coordinator.store.base import Store
from tests.support.builders import cluster, fleet_machine, item
from tests.support.harness import in_process_coordinator

BOTH = (item("base", "prepare"), item("join", "deploy"))
SPEC = cluster(BOTH, BOTH, name="bench", release="1")
APPLIED = frozenset(i.fingerprint() for i in BOTH)  # a Ready machine applied its role's items
ROUNDS = 5


async def seed(store: Store, fleet: int, pending: int, now: float) -> list[str]:
    """N Ready machines and `pending` unapproved Pending ones; returns the Pending ids."""
    await store.put_cluster(SPEC, now)
    ids = []
    for start in range(0, fleet + pending, 500):
        batch = []
        for i in range(start, min(start + 500, fleet + pending)):
            ready = fleet_machine(i)
            machine = replace(ready, last_seen=now, created_at=float(i), release=SPEC.release,
                              applied=ready.applied | APPLIED, role="manager" if i < 3 else "worker")
            if i >= fleet:
                machine = replace(machine, state=MachineState.PENDING, approved=False,
                                  role=None, applied=frozenset())
                ids.append(machine.id)
            batch.append(machine)
        await store.commit(batch)
    return ids


async def measure(fleet: int, changes: list[int], directory: Path | None) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        async with in_process_coordinator(Path(tmp), None, clock=time.time) as served:
            coordinator = served.coordinator
            pending = await seed(served.store, fleet, sum(changes) * ROUNDS, time.time())
            started, cpu = time.perf_counter(), time.process_time()
            await coordinator.reconciler.reconcile_once()
            rows.append(f"| {fleet:,} | first pass (loads the cluster) | "
                        f"{(time.perf_counter() - started) * 1000:.0f} ms | "
                        f"{(time.process_time() - cpu) * 1000:.0f} ms |")
            for k in changes:
                walls, cpus = [], []
                for _ in range(ROUNDS):
                    for machine_id in pending[:k]:
                        await coordinator.admin.approve(machine_id, "worker")
                    pending = pending[k:]
                    started, cpu = time.perf_counter(), time.process_time()
                    decided = await coordinator.reconciler.reconcile_once()
                    walls.append(time.perf_counter() - started)
                    cpus.append(time.process_time() - cpu)
                    assert len(decided) == k, (k, decided)
                rows.append(f"| {fleet:,} | {k} changed | {statistics.median(walls) * 1000:.1f} ms "
                            f"| {statistics.median(cpus) * 1000:.1f} ms |")
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--changed", type=int, nargs="+", default=[0, 1, 10, 100])
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database")
    parser.add_argument("--quick", action="store_true", help="200 machines, 0 and 1 changed")
    args = parser.parse_args()
    if args.quick:
        args.fleet, args.changed = [200], [0, 1]
    print(f"| machines | pass | wall (median of {ROUNDS}) | CPU |\n| --- | --- | --- | --- |")
    for fleet in args.fleet:
        for row in await measure(fleet, args.changed, args.dir):
            print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
