"""How light the agent is on a node, and how fast it hears of new work.

- start-up: wall time of `nodeagent --help` (interpreter start and imports included);
- idle: RSS and CPU of a registered agent waiting for approval (connected, long-polling,
  heartbeating every 10 s), against a real coordinator on 127.0.0.1; then again once it is
  approved, has applied its (no-op) items and is Ready: the daemon's steady state;
- wake latency: from the approval call returning to a long-polling client receiving its new
  assignment (the approval triggers a reconcile pass, the pass wakes the poller).

Run: .venv/bin/python bench/agent_idle.py [--idle-seconds 30] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

import psutil

from tests.support.builders import cluster, item, spec_text
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.waiting import wait_until

BIN = Path(sys.executable).parent
# A manager alone goes Pending -> Prepare -> Deploy -> Ready; workers only wake-latency.
SPEC = spec_text(cluster([item("noop", "prepare"), item("noop-deploy", "deploy")],
                         [item("noop", "prepare")], name="bench", release="1"))


def startup(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(BIN / "nodeagent"), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--wake-samples", type=int, default=20)
    parser.add_argument("--startup-runs", type=int, default=30)
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds the agent's work is left to settle before each idle window")
    parser.add_argument("--quick", action="store_true",
                        help="3 start-ups, 0.5 s to settle, 1 s idle, 3 wake samples: seconds")
    args = parser.parse_args()
    if args.quick:
        args.startup_runs, args.idle_seconds, args.wake_samples = 3, 1.0, 3
        args.settle = 0.5

    help_times = startup(args.startup_runs)
    print(f"`nodeagent --help` start-up over {len(help_times)} runs: "
          f"min {min(help_times) * 1000:.0f} ms, "
          f"median {statistics.median(help_times) * 1000:.0f} ms, "
          f"max {max(help_times) * 1000:.0f} ms")

    with tempfile.TemporaryDirectory() as name, \
            running_coordinator(Path(name), SPEC) as served:
        tmp = Path(name)
        admin = served.admin
        created = admin.request("POST", "/v1/clusters/bench/join-tokens", body={"ttl": "0"})
        config = tmp / "agent.yaml"
        config.write_text(json.dumps({
            "join": created["join"], "stateDir": str(tmp / "agent-state"),
            "heartbeatSeconds": 10, "ignorePrechecks": ["all"]}))
        agent = subprocess.Popen([str(BIN / "nodeagent"), "run", "--config", str(config)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            (machine,) = wait_until(lambda: admin.all_machines(), 30, "the registration")
            time.sleep(args.settle)  # registration done; let start-up work settle
            proc = psutil.Process(agent.pid)
            print("idle agent waiting for approval, " + idle(proc, args.idle_seconds))
            admin.request("POST", f"/v1/machines/{machine['id']}/approve",
                          body={"role": "manager"})
            served.wait_state(machine["hostname"], "Ready", timeout=60)
            time.sleep(args.settle)  # the last report delivered, the phase's child gone
            print("idle agent Ready after applying its items, " + idle(proc, args.idle_seconds))
        finally:
            agent.terminate()
            agent.wait()
        print(f"wake latency (approve -> long-poll answered), {args.wake_samples} machines: "
              + wake_latency(served, args.wake_samples))


def idle(proc: psutil.Process, seconds: float) -> str:
    """RSS at the end and at its peak, and CPU use, of the agent process over seconds."""
    cpu_before = proc.cpu_times()
    started = time.monotonic()
    peak_rss = proc.memory_info().rss
    while time.monotonic() - started < seconds:
        time.sleep(1)
        peak_rss = max(peak_rss, proc.memory_info().rss)
    cpu_after = proc.cpu_times()
    elapsed = time.monotonic() - started
    busy = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    rss = proc.memory_info().rss
    return (f"over {elapsed:.0f} s: RSS {rss / 2**20:.1f} MiB = {rss / 1e6:.1f} MB "
            f"(peak {peak_rss / 1e6:.1f} MB), CPU {100 * busy / elapsed:.3f}% of one core")


def wake_latency(served: ServedCoordinator, samples: int) -> str:
    """Register bare machines over the API and time the long-poll answer after approval."""
    latencies = []
    for index in range(samples):
        agent = served.register(f"wake-{index}", cluster="bench")
        first = served.assignment(agent)
        answered: list[float] = []

        def poll(agent: dict[str, str] = agent, after: int = first["generation"],
                 answered: list[float] = answered) -> None:
            served.assignment(agent, after=after, wait=30)
            answered.append(time.perf_counter())

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.2)  # the poll is parked
        served.admin.request("POST", f"/v1/machines/{agent['machine_id']}/approve",
                             body={"role": "worker"})
        approved = time.perf_counter()
        thread.join()
        latencies.append(answered[0] - approved)
    ordered = sorted(latencies)
    return (f"median {statistics.median(ordered) * 1000:.1f} ms, "
            f"p90 {ordered[int(0.9 * (len(ordered) - 1))] * 1000:.1f} ms, "
            f"max {ordered[-1] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
