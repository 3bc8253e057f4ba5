"""Agents riding out a coordinator restart: how long after a restarted `coordinator serve`
answers again every agent has its long-poll parked on it again.

Real agent daemons (nodeagent's Agent: its poll loop, heartbeats and reconnect backoff as
they are; see tests/support/daemons.py), --agents of them in --processes processes, registered
and Pending against a coordinator on SQLite over HTTPS on loopback, under coordinator.service's
descriptor limit. Once every poll is parked, the coordinator is stopped (SIGTERM, as `systemctl
restart` does), stays down --outage seconds, and is served again from the same data dir on the
same port. Its /metrics (nodeagent_agents_connected) is sampled every 20 ms meanwhile: time 0 is
its first answer; an agent is back when its poll is parked. With --before REV, the same run
with that revision's coordinator and agents first (exported with `git archive`), side by side.

    .venv/bin/python bench/reconnect.py --agents 200 --outage 10 --before main
    .venv/bin/python bench/reconnect.py --quick   # seconds; CI runs it

Prints, per revision: the agents back after p50/p90/max seconds, how many were back within
2 s, and the CPU the restarted coordinator spent until all were (its start-up included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from tests.support import daemons
from tests.support.builders import precheck_report
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.metrics import metric, scrape
from tests.support.probes import percentile
from tests.support.revisions import revision
from tests.support.units import under_coordinator_limits
from tests.support.waiting import wait_until

SAMPLE_SECONDS = 0.02
SOON_SECONDS = 2.0  # what an agent should be back within


def parked(served: ServedCoordinator) -> int | None:
    """Machines whose long-poll the coordinator holds now; None while it does not answer."""
    try:
        return int(metric(scrape(served, timeout=5), "nodeagent_agents_connected") or 0)
    except OSError:
        return None


@contextlib.contextmanager
def fleet(served: ServedCoordinator, tmp: Path, agents: int, processes: int,
          tree: Path) -> Iterator[None]:
    """agents registered, their daemons running (tree's nodeagent) until the end."""
    machines = []
    for index in range(agents):
        hostname = f"node-{index}"
        registered = served.register(hostname)
        machines.append({**registered, "state_dir": str(tmp / "agents" / hostname),
                         "precheck": precheck_report(hostname, checks=13)})
    started = []
    try:
        for index in range(processes):
            plan = tmp / f"plan-{index}.json"
            plan.write_text(json.dumps({
                "url": served.url, "ca_file": str(served.ca_file), "heartbeat_seconds": 10,
                "machines": machines[index::processes]}))
            started.append(subprocess.Popen(
                [sys.executable, "-c", daemons.RUN_DAEMONS, daemons.__file__, str(plan)],
                cwd=tmp / "agents", env={**os.environ, "PYTHONPATH": str(tree)}))
        wait_until(lambda: parked(served) == agents, 120, "every agent's long-poll",
                   interval=0.5)
        yield
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=30)


def restarted(served: ServedCoordinator, outage: float, agents: int) -> tuple[list[float], float]:
    """Stop the coordinator, serve it again after outage seconds; how long after its first
    answer the 1st, 2nd... agent was back on its long-poll (inf: never within 90 s), and the
    CPU seconds the new coordinator spent until then (its start-up included)."""
    samples: list[tuple[float, int | None]] = []
    done = threading.Event()

    def sample() -> None:
        """Each count at the time it was answered: a loaded coordinator answers late."""
        while not done.is_set():
            count = parked(served)
            samples.append((time.monotonic(), count))
            time.sleep(SAMPLE_SECONDS)

    served.stop()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(outage)
    served.start()
    with contextlib.suppress(AssertionError):
        wait_until(lambda: bool(samples) and samples[-1][1] == agents, 90, "the agents back",
                   interval=0.1)
    done.set()
    cpu = psutil.Process(served.pid).cpu_times()
    sampler.join()
    answering = [(at, count) for at, count in samples if count is not None]
    first = answering[0][0]
    return [next((at - first for at, count in answering if count >= k), float("inf"))
            for k in range(1, agents + 1)], cpu.user + cpu.system


def summary(back: list[float]) -> str:
    soon = sum(1 for seconds in back if seconds <= SOON_SECONDS)
    return (f"back after p50 {percentile(back, 0.5):.2f} s, p90 {percentile(back, 0.9):.2f} s, "
            f"max {max(back):.2f} s; {soon}/{len(back)} within {SOON_SECONDS:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2, help="the agents run in so many")
    parser.add_argument("--outage", type=float, default=10.0,
                        help="seconds between the coordinator stopping and serving again")
    parser.add_argument("--before", metavar="REV",
                        help="also measure the coordinator and agents of this git revision, "
                             "first")
    parser.add_argument("--quick", action="store_true",
                        help="3 agents, a 0.5 s outage, this worktree only: seconds")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.processes, args.outage, args.before = 3, 1, 0.5, None
    for rev in ([args.before] if args.before else []) + [None]:
        with revision(rev) as tree, tempfile.TemporaryDirectory() as name, running_coordinator(
                Path(name), serve_args=["--register-rate", "0", "--register-rate-total", "0",
                                        "--connections-per-address", "0"],
                prefix=under_coordinator_limits(tree / "systemd")) as served:
            tmp = Path(name)
            (tmp / "agents").mkdir()
            with fleet(served, tmp, args.agents, args.processes, tree):
                back, cpu = restarted(served, args.outage, args.agents)
            print(f"{rev or 'this worktree'}: {args.agents} agents, coordinator down "
                  f"{args.outage:g} s: {summary(back)}; coordinator CPU until then {cpu:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()
