"""What shipping costs: the time `make packages` takes, the packages' sizes, the bundle's
size on disk, the bundled agent's start-up against the venv's, and its memory while it runs.

- build: wall time of packaging/build.sh (both PyInstaller bundles, four nfpm packages);
- sizes: each .deb and .rpm, and each bundle under build/packaging/bundle;
- start-up: `nodeagent --help`, bundle (/opt/nodeagent/nodeagent) against .venv/bin/nodeagent;
- RSS: the bundled `nodeagent run` (its child prechecks done) waiting for a coordinator that
  does not answer, sampled after --settle seconds.

Run: .venv/bin/python bench/packages.py [--no-build] [--runs 20] [--settle 15] [--quick]

--quick builds nothing and measures what is there: without bundles, the venv's agent alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' helpers

import psutil

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "build/packaging/bundle"
BUNDLED_AGENT = BUNDLES / "nodeagent/nodeagent"
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


def idle_rss(binary: Path, settle: float) -> float:
    """MiB of the agent and its children after settle seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(f"coordinator: {{url: 'http://127.0.0.1:{free_port()}'}}\n"
                          f"joinToken: join_bench\nstateDir: {tmp}/state\n")
        agent = subprocess.Popen([str(binary), "run", "--config", str(config)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    parser.add_argument("--quick", action="store_true", help="no build, 2 runs, 1 s to settle")
    args = parser.parse_args()
    if args.quick:
        args.no_build, args.runs, args.settle = True, 2, 1.0
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
        if (BUNDLES / bundle).exists():
            print(f"/opt/{bundle} installed: {tree_bytes(BUNDLES / bundle) / 2**20:.1f} MiB")
    agents = {"venv": VENV_AGENT}
    if BUNDLED_AGENT.exists():
        agents = {"bundle": BUNDLED_AGENT, **agents}
    else:
        print("no bundle built (make packages): the venv's agent alone")
    for label, binary in agents.items():
        print(f"nodeagent --help, {label + ',':<7} {args.runs} runs: "
              f"{summary_ms(timed([str(binary), '--help'], args.runs))}")
    label, binary = next(iter(agents.items()))
    print(f"{'bundled' if label == 'bundle' else 'venv'} nodeagent run, RSS after {args.settle:g} s "
          f"(with children): {idle_rss(binary, args.settle):.1f} MiB")


if __name__ == "__main__":
    main()
