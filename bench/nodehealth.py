"""What watching the Nodes of a large settled cluster costs: Kubernetes API calls and the
coordinator's CPU per interval (nodes.NODE_HEALTH_SECONDS), against the test API server.

The store (SQLite, on disk) is seeded with N Ready workers whose Nodes were found Ready, and
the test API server (tests/support/kubeapi.py, in its own thread) with their N marked Nodes.
After the first pass (which loads the cluster), each round moves the clock one interval on,
runs a pass and waits for the cluster's list of its marked Nodes: a settled round (all Ready),
then a round in which 10 Nodes went NotReady (loaded and recorded). The CPU is the
coordinator's thread's alone (the API server's thread is not counted).

    .venv/bin/python bench/nodehealth.py [--nodes 1000 10000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

from coordinator.domain.nodes.nodes import (
    MACHINE_ID_LABEL,
    NODE_HEALTH_SECONDS,
    desired_metadata,
    observed,
)
from coordinator.store.base import Store
from tests.support.builders import cluster, fleet_machine, item
from tests.support.harness import InProcessCoordinator, ManualClock, in_process_coordinator
from tests.support.kubeapi import KubeApiServer, kube_api_server

ITEMS = (item("base", "prepare"), item("join", "deploy"))
DOWN = 10  # Nodes gone NotReady in the second round


async def seed(store: Store, kube: KubeApiServer, nodes: int, kubeconfig: Path,
               now: float) -> None:
    """N Ready workers, their Nodes found Ready and marked on the API server."""
    spec = cluster(ITEMS, ITEMS, name="bench", release="1", heartbeatTimeoutSeconds=86400,
                   kubernetes={"kubeconfig": str(kubeconfig)})  # they answer all along
    await store.put_cluster(spec, now)
    applied = frozenset(i.fingerprint() for i in ITEMS)
    for start in range(0, nodes, 500):
        batch = []
        for index in range(start, min(start + 500, nodes)):
            m = fleet_machine(index)
            m = replace(m, last_seen=now, release=spec.release, applied=m.applied | applied)
            batch.append(replace(m, node=observed(None, now, m.hostname, ("True", "Ready", ""),
                                                  desired_metadata(spec, m).digest())))
        await store.commit(batch)
        with kube.locked() as api:
            for m in batch:
                api.add_node(m.hostname, {MACHINE_ID_LABEL: m.id})


async def interval(env: InProcessCoordinator, kube: KubeApiServer) -> tuple[int, float, float]:
    """One interval on: the API calls, the coordinator's CPU and wall time of its pass and list."""
    assert isinstance(env.clock, ManualClock)
    env.clock.now += NODE_HEALTH_SECONDS
    with kube.locked() as api:
        before = len(api.calls)
    cpu, wall = time.thread_time(), time.perf_counter()
    await env.coordinator.reconciler.reconcile_once()
    # The list runs as the node watch's task; wait for it (and the writes it makes).
    await asyncio.gather(*env.coordinator.nodes._sweeps.values())
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    with kube.locked() as api:
        return len(api.calls) - before, cpu, wall


async def measure(nodes: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp, kube_api_server() as kube:
        kubeconfig = kube.write_kubeconfig(Path(tmp) / "kubeconfig")
        async with in_process_coordinator(Path(tmp), None, clock=ManualClock()) as env:
            await seed(env.store, kube, nodes, kubeconfig, env.clock())
            await env.coordinator.reconciler.reconcile_once()  # loads the cluster
            await interval(env, kube)  # the first list falls within the first interval
            calls, cpu, wall = await interval(env, kube)
            rows = [f"| {nodes:,} | settled | {calls} | {cpu * 1000:.0f} ms | {wall * 1000:.0f} ms |"]
            with kube.locked() as api:
                for index in range(DOWN):
                    api.set_node_ready(f"node-{index:05d}", False)
            calls, cpu, wall = await interval(env, kube)
            machine = await env.store.get_machine("machine-00000")
            assert machine is not None and machine.node is not None and not machine.node.ready
            rows.append(f"| {nodes:,} | {DOWN} Nodes NotReady | {calls} | {cpu * 1000:.0f} ms "
                        f"| {wall * 1000:.0f} ms |")
            return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--quick", action="store_true", help="200 Nodes")
    args = parser.parse_args()
    if args.quick:
        args.nodes = [200]
    print(f"| marked Nodes | interval ({NODE_HEALTH_SECONDS:.0f} s) | API calls | coordinator "
          "CPU | wall |\n| --- | --- | --- | --- | --- |")
    for nodes in args.nodes:
        for row in await measure(nodes):
            print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
