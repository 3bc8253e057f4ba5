"""How light the agent is on a node, and how fast it hears of new work.

- start-up: wall time of `nodeagent --help` (interpreter start and imports included);
- idle: RSS and CPU of a registered agent waiting for approval (connected, long-polling,
  heartbeating every 10 s), against a real coordinator on 127.0.0.1; then again once it is
  approved, has applied its (no-op) items and is Ready: the daemon's steady state;
- wake latency: from the approval call returning to a long-polling client receiving its new
  assignment (the approval triggers a reconcile pass, the pass wakes the poller).

Run: .venv/bin/python bench/agent_idle.py [--idle-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from coordinator.cli.client import AdminClient

BIN = Path(sys.executable).parent
# A manager alone goes Pending -> Prepare -> Deploy -> Ready; workers only wake-latency.
SPEC = """\
name: bench
release: "1"
machineTypes:
  manager:
    - {name: noop, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: noop-deploy, phase: deploy, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: noop, phase: prepare, action: {type: exec, argv: ["true"]}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def startup(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(BIN / "nodeagent"), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return times


def wait_for(check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("timed out")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--wake-samples", type=int, default=20)
    args = parser.parse_args()

    help_times = startup(30)
    print(f"`nodeagent --help` start-up over {len(help_times)} runs: "
          f"min {min(help_times) * 1000:.0f} ms, "
          f"median {statistics.median(help_times) * 1000:.0f} ms, "
          f"max {max(help_times) * 1000:.0f} ms")

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        data = tmp / "data"
        ca = str(data / "pki" / "ca.crt")
        subprocess.run([str(BIN / "coordinator"), "init", "--data-dir", str(data), "--name",
                        "127.0.0.1", "--listen", f"127.0.0.1:{port}"], check=True,
                       stdout=subprocess.DEVNULL)
        coordinator = subprocess.Popen(
            [str(BIN / "coordinator"), "serve", "--data-dir", str(data), "--listen",
             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agent = None
        try:
            admin = AdminClient(url, (data / "admin.token").read_text().strip(), ca_file=ca)
            wait_for(lambda: admin.get("/healthz"))
            admin.request("PUT", "/v1/clusters", text=SPEC, content_type="application/yaml")
            created = admin.request("POST", "/v1/clusters/bench/join-tokens", body={"ttl": "0"})
            config = tmp / "agent.yaml"
            config.write_text(json.dumps({
                "join": created["join"], "stateDir": str(tmp / "agent-state"),
                "heartbeatSeconds": 10, "ignorePrechecks": ["all"]}))
            agent = subprocess.Popen([str(BIN / "nodeagent"), "run", "--config", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: admin.get("/v1/machines"))
            time.sleep(2)  # registration done; let start-up work settle
            proc = psutil.Process(agent.pid)
            print("idle agent waiting for approval, " + idle(proc, args.idle_seconds))
            (machine,) = admin.get("/v1/machines")
            admin.request("POST", f"/v1/machines/{machine['id']}/approve",
                          body={"role": "manager"})
            wait_for(lambda: admin.get(f"/v1/machines/{machine['id']}")["state"] == "Ready", 60)
            time.sleep(2)  # the last report delivered, the phase's child gone
            print("idle agent Ready after applying its items, " + idle(proc, args.idle_seconds))
            agent.terminate()
            agent.wait()
            agent = None
            print(f"wake latency (approve -> long-poll answered), {args.wake_samples} machines: "
                  + wake_latency(admin, url, ca, created["token"], args.wake_samples))
        finally:
            if agent is not None:
                agent.kill()
            coordinator.terminate()
            coordinator.wait()


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


def wake_latency(admin: AdminClient, url: str, ca: str, join: str, samples: int) -> str:
    """Register bare machines over the API and time the long-poll answer after approval."""
    from nodeagent.prechecks.runner import summarize
    from nodeagent.protocol import PrecheckReport

    report = PrecheckReport(hostname="x", role="worker", started_at=0, duration=0, ok=True,
                            summary=summarize([]), checks=[]).model_dump(mode="json", by_alias=True)
    latencies = []
    for index in range(samples):
        agent = AdminClient(url, None, ca_file=ca).request("POST", "/v1/agent/register", body={
            "join_token": join, "hostname": f"wake-{index}", "ip": None, "facts": {},
            "precheck": report})
        poller = AdminClient(url, agent["credential"], ca_file=ca)
        first = poller.get(f"/v1/agent/machines/{agent['machine_id']}/assignment")
        answered: list[float] = []

        def poll(poller=poller, agent=agent, first=first, answered=answered) -> None:
            poller.get(f"/v1/agent/machines/{agent['machine_id']}/assignment"
                       f"?after={first['generation']}&wait=30")
            answered.append(time.perf_counter())

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.2)  # the poll is parked
        admin.request("POST", f"/v1/machines/{agent['machine_id']}/approve",
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
