"""What shipping costs: the time `make packages` takes, the packages' sizes, the bundle's
size on disk, the bundled agent's start-up against the venv's, and its memory while it runs.

- build: wall time of packaging/build.sh (both PyInstaller bundles, four nfpm packages);
- sizes: each .deb and .rpm, and each bundle under build/packaging/bundle;
- start-up: `nodeagent --help`, bundle (/opt/nodeagent/nodeagent) against .venv/bin/nodeagent;
- RSS: the bundled `nodeagent run` (its child prechecks done) waiting for a coordinator that
  does not answer, sampled after --settle seconds.

Run: .venv/bin/python bench/packages.py [--no-build] [--runs 20] [--settle 15]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "build/packaging/bundle"
VENV_AGENT = Path(sys.executable).with_name("nodeagent")


def timed(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def summary_ms(times: list[float]) -> str:
    return (f"min {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms, "
            f"max {max(times) * 1000:.0f} ms")


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def idle_rss(settle: float) -> float:
    """MiB of the bundled agent and its children after settle seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(f"coordinator: {{url: 'http://127.0.0.1:{closed_port()}'}}\n"
                          f"joinToken: join_bench\nstateDir: {tmp}/state\n")
        agent = subprocess.Popen([str(BUNDLES / "nodeagent/nodeagent"), "run", "--config",
                                  str(config)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            time.sleep(settle)
            process = psutil.Process(agent.pid)
            return sum(p.memory_info().rss for p in [process, *process.children(True)]) / 2**20
        finally:
            agent.terminate()
            agent.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="measure what dist/ holds")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--settle", type=float, default=15.0)
    args = parser.parse_args()
    dist = REPO / "dist"
    if not args.no_build:
        start = time.perf_counter()
        subprocess.run(["bash", str(REPO / "packaging/build.sh")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "DIST": str(dist)})
        print(f"make packages (2 bundles, 4 packages): {time.perf_counter() - start:.1f} s")
    for package in sorted(dist.glob("*.deb")) + sorted(dist.glob("*.rpm")):
        print(f"{package.name}: {package.stat().st_size / 2**20:.1f} MiB")
    for bundle in ("nodeagent", "coordinator"):
        print(f"/opt/{bundle} installed: {tree_bytes(BUNDLES / bundle) / 2**20:.1f} MiB")
    bundled = timed([str(BUNDLES / "nodeagent/nodeagent"), "--help"], args.runs)
    venv = timed([str(VENV_AGENT), "--help"], args.runs)
    print(f"nodeagent --help, bundle, {args.runs} runs: {summary_ms(bundled)}")
    print(f"nodeagent --help, venv,   {args.runs} runs: {summary_ms(venv)}")
    print(f"bundled nodeagent run, RSS after {args.settle:g} s (with children): "
          f"{idle_rss(args.settle):.1f} MiB")


if __name__ == "__main__":
    main()
