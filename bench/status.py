"""What the operator views cost on a large cluster: the status endpoint (stages, rollout,
from the SQLite store) as the dashboard asks for it, with nothing changed and with a machine
moved on between calls, the status with every machine's view, the computation from scratch
without I/O (what a call cost before the status was kept between calls), and a /metrics
scrape. The dashboard and `status --watch` ask for the status once a second (and on every
burst of events), so it must stay well under that.

    .venv/bin/python bench/status.py [--machines 1000,10000] [--runs 20] [--quick]
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

from coordinator.domain.changes import Change
from coordinator.domain.model import ItemProgress, Machine, MachineState
from coordinator.domain.records import Event
from coordinator.domain.views.status import History, machine_step, rollout, stages
from tests.support.builders import cluster, items
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.probes import percentile
from tests.support.servegc import serve_gc

ITEMS = items("prepare", 5) + items("deploy", 5)
SPEC = cluster(ITEMS, ITEMS, name="bench", release="1")
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
                    progress=ItemProgress(item="prepare-1", attempt=3, status="failed", error="exit 1",
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


async def seeded(coordinator: InProcessCoordinator, machines: list[Machine],
                 events: list[Event]) -> None:
    store = coordinator.store
    await store.put_cluster(SPEC, 0.0)
    for start in range(0, len(machines), 500):
        await store.commit(machines[start:start + 500])
    for start in range(0, len(events), 2000):
        await store.commit((), [replace(e) for e in events[start:start + 2000]])


async def endpoint_seconds(directory: Path, machines: list[Machine], events: list[Event],
                           runs: int) -> dict[str, list[float]]:
    """Seconds of each request over HTTP: the status as the dashboard asks for it (without
    machines) when nothing changed between calls and when one machine moved on between calls
    (a state change and its event), the status with every machine's view, and a /metrics
    scrape. The first status call reads the cluster whole: it is the warm-up, not counted."""
    status = "/v1/clusters/bench/status"
    times: dict[str, list[float]] = {"steady": [], "changing": [], "machines": [], "metrics": []}
    async with in_process_coordinator(directory, None, clock=time.time) as env:
        await seeded(env, machines, events)

        async def timed(path: str, into: str) -> None:
            started = time.perf_counter()
            response = await env.client.get(path, headers=env.admin)
            await response.read()
            assert response.status == 200, response.status
            times[into].append(time.perf_counter() - started)

        await timed(f"{status}?machines=false", "steady")
        times["steady"].clear()
        async with serve_gc():  # as `coordinator serve` collects garbage
            for _ in range(runs):
                await timed(f"{status}?machines=false", "steady")
            for n in range(runs):
                moved = replace(machines[n * 7 % len(machines)], state_since=time.time())
                await env.coordinator.writes.apply(Change(machines=[moved], events=[Event(
                    time=moved.state_since, cluster="bench", kind="state", message="",
                    machine=moved.id, hostname=moved.hostname, data={"from": "Prepare", "to": "Deploy"})]))
                await timed(f"{status}?machines=false", "changing")
            for _ in range(runs):
                await timed(status, "machines")
                await timed("/metrics", "metrics")
    return times


def ms(seconds: list[float], tail: bool = False) -> str:
    """The median (tail: the p99) in milliseconds."""
    return f"{(percentile(seconds, 0.99) if tail else statistics.median(seconds)) * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", default="1000,10000")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="200 machines, 2 runs: seconds")
    args = parser.parse_args()
    if args.quick:
        args.machines, args.runs = "200", 2
    print(f"{'machines':>8} {'status p50':>11} {'p99':>7} {'a change between calls p50':>27} "
          f"{'p99':>7} {'with machines p50':>18} {'pure CPU':>9} {'/metrics':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(c) for c in args.machines.split(",")):
            machines, events = fleet(count)
            pure = min(pure_seconds(machines, events) for _ in range(args.runs))
            directory = Path(tmp) / f"bench-{count}"
            directory.mkdir()
            times = asyncio.run(endpoint_seconds(directory, machines, events, args.runs))

            steady, changing = times["steady"], times["changing"]
            print(f"{count:>8} {ms(steady):>11} {ms(steady, True):>7} {ms(changing):>27} "
                  f"{ms(changing, True):>7} {ms(times['machines']):>18} {pure * 1000:>6.0f} ms "
                  f"{ms(times['metrics']):>9}")


if __name__ == "__main__":
    main()
