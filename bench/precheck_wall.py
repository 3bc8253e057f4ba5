"""Wall time of `nodeagent precheck` when every network check answers locally.

Starts a real chronyd (NTP on 127.0.0.1) and an HTTP server with /healthz on 127.0.0.1,
points the agent's config at them, and times whole CLI runs (interpreter start-up and
imports included) plus the in-process check phase. A second scenario adds an NTP address
that never answers, to show the run is bounded by ntp.timeout, not stalled.

Run: .venv/bin/python bench/precheck_wall.py [--runs 20] [--quick]   (needs chronyd: apt-get install chrony)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' servers

from tests.support.chrony import chronyd
from tests.support.ports import free_port
from tests.support.process import serving

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def health_server(tmp: Path) -> Iterator[int]:
    docroot = tmp / "www"
    docroot.mkdir()
    (docroot / "healthz").write_text("ok\n")
    port = free_port()
    with serving([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                  "--directory", str(docroot)], tmp / "http.log", lambda: listening(port),
                 "the HTTP server"):
        yield port


def time_runs(config: Path, runs: int) -> tuple[list[float], list[float], dict[str, str]]:
    walls, phases = [], []
    statuses: dict[str, str] = {}
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([NODEAGENT, "precheck", "--config", str(config), "--output", "json"],
                              capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - started)
        report = json.loads(done.stdout)
        phases.append(report["duration"])
        statuses = {c["name"]: c["status"] for c in report["checks"]}
    return walls, phases, statuses


def summary(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"{label:<34} min {min(values) * 1000:7.1f} ms   "
            f"median {statistics.median(values) * 1000:7.1f} ms   "
            f"p90 {p90 * 1000:7.1f} ms   max {max(values) * 1000:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="1 run of each, after 1 to warm the cache: seconds")
    args = parser.parse_args()
    stalled_runs = max(5, args.runs // 4)
    if args.quick:
        args.runs = stalled_runs = 1
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with chronyd(tmp / "chrony") as ntp_port, health_server(tmp) as http_port, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
            silent.bind(("127.0.0.1", 0))  # reads nothing, answers nothing
            local = tmp / "local.yaml"
            local.write_text(
                f"coordinator: {{url: 'http://127.0.0.1:{http_port}', timeout: 1}}\n"
                f"ntp: {{servers: ['127.0.0.1:{ntp_port}'], timeout: 1}}\n")
            stalled = tmp / "stalled.yaml"
            stalled.write_text(
                f"coordinator: {{url: 'http://127.0.0.1:{http_port}', timeout: 1}}\n"
                f"ntp: {{servers: ['127.0.0.1:{ntp_port}', "
                f"'127.0.0.1:{silent.getsockname()[1]}'], timeout: 0.5}}\n")
            time_runs(local, min(2, args.runs))  # warm the page cache
            walls, phases, statuses = time_runs(local, args.runs)
            network = {k: statuses[k] for k in ("coordinator", "ntp-reachable", "time-skew")}
            print(f"nodeagent precheck, {args.runs} runs, network checks answering locally: "
                  f"{network}")
            print(summary("whole CLI run (wall)", walls))
            print(summary("checks phase (report.duration)", phases))
            walls, phases, statuses = time_runs(stalled, stalled_runs)
            print(f"with one silent NTP server (ntp.timeout 0.5 s): "
                  f"ntp-reachable={statuses['ntp-reachable']}")
            print(summary("whole CLI run (wall)", walls))
            print(summary("checks phase (report.duration)", phases))


if __name__ == "__main__":
    main()
