"""Drain a node carrying 200 pods (ReplicaSet pods, no blocking budget): this project's drain
(coordinator/kube.py, in-process as the coordinator runs it) against `kubectl drain` (the
installed binary, as an operator runs it), on the same test Kubernetes API server with the
same workload built afresh for each run. Prints each run and the ratio ours/kubectl of the
medians (target: at most 0.5).

    .venv/bin/python bench/drain.py [--runs 5] [--pods 200] [--termination-delay 0.2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.domain.model import DrainSettings
from coordinator.kube import Kube
from tests.support.kubeapi import KubeApiServer, kube_api_server
from tests.support.workloads import crowded_node


async def ours(server: KubeApiServer, kubeconfig: Path) -> float:
    started = time.perf_counter()
    async with await Kube.connect(str(kubeconfig)) as kube:
        result = await kube.drain("w1", DrainSettings(), time.time() + 300)
    elapsed = time.perf_counter() - started
    assert result.drained, result.message
    return elapsed


def kubectl(server: KubeApiServer, kubeconfig: Path, binary: str) -> float:
    started = time.perf_counter()
    subprocess.run([binary, "--kubeconfig", str(kubeconfig), "drain", "w1",
                    "--ignore-daemonsets", "--timeout=300s"], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--termination-delay", type=float, default=0.2,
                        help="seconds an evicted pod takes to terminate (the kubelet's part)")
    parser.add_argument("--quick", action="store_true", help="one run of 20 pods: seconds")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.pods, args.termination_delay = 1, 20, 0.02
    binary = shutil.which("kubectl")
    if binary is None:
        sys.exit("kubectl is not installed")
    times: dict[str, list[float]] = {"ours": [], "kubectl": []}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name in ("kubectl", "ours"):
                with kube_api_server(crowded_node(args.pods, args.termination_delay)) as server:
                    kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
                    if name == "ours":
                        elapsed = asyncio.run(ours(server, kubeconfig))
                    else:
                        elapsed = kubectl(server, kubeconfig, binary)
                    assert len(server.cluster.evictions) == args.pods, name
                    requests = server.cluster.requests
                times[name].append(elapsed)
                print(f"run {run + 1} {name:<8} {elapsed:7.3f} s  {requests} API requests", flush=True)
    for name, values in times.items():
        print(f"{name:<8} median {statistics.median(values):.3f} s  min {min(values):.3f} s")
    ratio = statistics.median(times["ours"]) / statistics.median(times["kubectl"])
    print(f"ratio ours/kubectl (medians): {ratio:.2f}  (target <= 0.5)")


if __name__ == "__main__":
    main()
