"""What the operator views cost on a large cluster: the status endpoint (stages, rollout,
every machine's step, from the SQLite store), the same computation without I/O, and a
/metrics scrape. The dashboard and `status --watch` ask for the status once a second
(and on every burst of events), so it must stay well under that.

    .venv/bin/python bench/status.py [--machines 1000,5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from coordinator.api.app import create_app
from coordinator.domain.model import ClusterSpec, ItemProgress, Machine, MachineState
from coordinator.domain.records import Event
from coordinator.domain.status import History, machine_step, rollout, stages
from coordinator.metrics import Metrics
from coordinator.service.coordinator import Coordinator
from coordinator.store.sqlite import SQLiteStore

ITEMS = [{"name": f"item-{i}", "phase": phase, "action": {"type": "exec", "argv": ["true"]}}
         for phase in ("prepare", "deploy") for i in range(5)]
SPEC = ClusterSpec.model_validate({"name": "bench", "release": "1",
                                   "machineTypes": {"manager": ITEMS, "worker": ITEMS}})
PATH = ["Pending", "Prepare", "Deploy", "Ready"]


def fleet(count: int) -> tuple[list[Machine], list[Event]]:
    """A rollout half done: a tenth of the machines deploying (one item failing), the rest of
    the first half Ready, the second half still preparing; four state events per machine."""
    machines: list[Machine] = []
    events: list[Event] = []
    fingerprints = {i.fingerprint() for i in SPEC.items("worker", "prepare")}
    for n in range(count):
        state = (MachineState.DEPLOY if n % 10 == 0 else
                 MachineState.READY if n < count // 2 else MachineState.PREPARE)
        m = Machine(id=f"m-{n:05d}", cluster="bench", hostname=f"node-{n:05d}", ip="10.0.0.1",
                    state=state, role="manager" if n < 3 else "worker", approved=True,
                    applied=frozenset(fingerprints) if state is not MachineState.PREPARE
                    else frozenset(), created_at=1.0, state_since=10.0, last_seen=100.0,
                    progress=ItemProgress(item="item-1", attempt=3, status="failed", error="exit 1",
                                      updated_at=90.0, failing_since=50.0))
        machines.append(m)
        for step, to in enumerate(PATH[1:PATH.index(state.value) + 1]):
            events.append(Event(time=2.0 + step, cluster="bench", kind="state", message="",
                                machine=m.id, hostname=m.hostname,
                                data={"from": PATH[step], "to": to}))
    return machines, events


def pure_seconds(machines: list[Machine], events: list[Event]) -> float:
    started = time.process_time()
    history = History(events)
    stages(SPEC, 0.0, machines, history, 100.0)
    rollout(SPEC, machines, history, 100.0)
    for m in machines:
        machine_step(SPEC, m, 100.0)
    return time.process_time() - started


async def endpoint_seconds(directory: Path, machines: list[Machine], events: list[Event],
                           runs: int) -> list[float]:
    store = SQLiteStore(directory / f"bench-{len(machines)}.db")
    await store.open()
    await store.put_cluster(SPEC, 0.0)
    for start in range(0, len(machines), 500):
        await store.commit(machines[start:start + 500])
    for start in range(0, len(events), 2000):
        await store.commit((), [replace(e) for e in events[start:start + 2000]])
    client = TestClient(TestServer(create_app(Coordinator(store), "token", directory)))
    await client.start_server()
    times = []
    try:
        for _ in range(runs):
            started = time.perf_counter()
            response = await client.get("/v1/clusters/bench/status",
                                        headers={"Authorization": "Bearer token"})
            await response.read()
            assert response.status == 200
            times.append(time.perf_counter() - started)
    finally:
        await client.close()
        await store.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", default="1000,5000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'machines':>8} {'status API median':>18} {'min':>8} {'pure CPU':>9} {'/metrics':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(c) for c in args.machines.split(",")):
            machines, events = fleet(count)
            pure = min(pure_seconds(machines, events) for _ in range(args.runs))
            api = asyncio.run(endpoint_seconds(Path(tmp), machines, events, args.runs))
            metrics = Metrics()
            started = time.perf_counter()
            for _ in range(args.runs):
                metrics.exposition(machines)
            scrape = (time.perf_counter() - started) / args.runs
            print(f"{count:>8} {statistics.median(api) * 1000:>15.0f} ms {min(api) * 1000:>5.0f} ms "
                  f"{pure * 1000:>6.0f} ms {scrape * 1000:>6.1f} ms")


if __name__ == "__main__":
    main()
