"""The service's three loops against real components (a SQLite store, the API, the test
Kubernetes API server), each through its own module: the reconciler's pass moves machines and
wakes their long-polls in one commit, the drainer drains a Node under a budget and the machine
moves on, the Node watch notes Nodes gone NotReady (one commit per list of them). Their
decisions are table-tested beside them (tests/unit/coordinator/test_reconciling.py,
test_draining.py, test_nodewatching.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from coordinator.domain.changes import Change
from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL, NODE_HEALTH_SECONDS
from coordinator.domain.records import Event
from coordinator.service.drainer import Drainer
from coordinator.service.nodewatch import NodeWatch
from coordinator.service.reconciler import Reconciler
from tests.integration.api.test_nodes_api import _state, deployed_items, ready_manager, spec
from tests.support.harness import InProcessCoordinator, ManualClock, in_process_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.waiting import wait_until_async


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with kube_api_server(Cluster()) as server:
        yield server


@pytest.fixture
async def kube_env(tmp_path: Path, kube: KubeApiServer) -> AsyncIterator[InProcessCoordinator]:
    """The coordinator of a cluster whose Nodes it reaches through the test API server."""
    async with in_process_coordinator(tmp_path, spec(kube, tmp_path)) as running:
        yield running


def commits(env: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The hostnames of the machines each transaction of env's store writes from now on, one
    list per transaction (the real store writes them: Store.apply, which Store.commit is)."""
    written: list[list[str]] = []
    apply = env.store.apply

    async def counted(change: Change) -> list[Event]:
        written.append(sorted(m.hostname for m in change.machines))
        return await apply(change)

    monkeypatch.setattr(env.store, "apply", counted)
    return written


async def test_one_pass_moves_machines_notes_a_silent_one_and_wakes_the_long_poll(
        env: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    reconciler: Reconciler = env.coordinator.reconciler
    await env.register("w9")
    agent = await env.register("m1")
    await reconciler.reconcile_once()
    held = (await env.assignment(agent))["generation"]
    polling = asyncio.create_task(env.assignment(agent, after=held, wait=20))
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    stored = await env.store.get_cluster("lab")
    assert stored is not None and isinstance(env.clock, ManualClock)
    env.clock.now += stored.spec.settings.heartbeat_timeout_seconds + 1  # w9 went silent
    await env.heartbeat(agent)

    written = commits(env, monkeypatch)
    decided = await reconciler.reconcile_once()
    assert written == [["m1", "w9"]], "the pass's change is not one commit"
    assert [(d.hostname, d.to_state.value if d.to_state else None) for d in decided] == \
        [("m1", "Prepare")]
    woken = await asyncio.wait_for(polling, 5)  # long before its 20 s wait ran out
    assert woken["state"] == "Prepare" and woken["generation"] > held
    assert [i["name"] for i in woken["items"]] == ["setup"]
    assert (await env.machine("w9"))["responding"] is False
    events = [(e["kind"], e["hostname"]) for e in await env.call("GET", "/v1/events", 200)
              if e["time"] == env.clock.now]
    assert events == [("not-responding", "w9"), ("state", "m1")]
    assert await reconciler.reconcile_once() == [], "a second pass found nothing left to do"


async def test_the_drainer_drains_the_node_under_its_budget_and_the_machine_moves_on(
        kube_env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    drainer: Drainer = kube_env.coordinator.drainer
    await ready_manager(kube_env, kube)
    w1 = await deployed_items(kube_env, "w1", "worker")
    with kube.locked() as cluster:
        cluster.add_node("w1.lab", {MACHINE_ID_LABEL: w1["machine_id"]})
        cluster.add_node("w2.lab")
        cluster.add_replicaset("default", "web", 3, {"app": "web"}, nodes=["w1.lab"])
        cluster.add_pdb("default", "web", {"app": "web"}, min_available=2)
    await kube_env.until("w1 Ready", lambda: _state(kube_env, "w1", "Ready"))

    await kube_env.call("PUT", "/v1/clusters", 200, data=spec(kube, tmp_path, "2.0"))

    async def stage(expected: str) -> bool:
        drain = (await kube_env.machine("w1"))["drain"]
        return bool(drain and drain["stage"] == expected)

    await kube_env.until("w1 drained", lambda: stage("Drained"), timeout=30)
    with kube.locked() as cluster:
        assert cluster.cordoned() == ["w1.lab"] and cluster.pods_on("w1.lab") == []
        assert cluster.min_healthy["default/web"] >= 2, "the budget was violated"
    drain = (await kube_env.machine("w1"))["drain"]
    assert drain["evicted"] == 3 and drain["message"].startswith("3 pods evicted"), drain

    async def upgraded() -> bool:
        await kube_env.report_all(w1)
        found = await kube_env.machine("w1")
        return bool(found["state"] == "Ready" and found["release"] == "2.0")

    await kube_env.until("w1 upgraded", upgraded)
    assert kube.cluster.uncordons == ["w1.lab"] and kube.cluster.cordoned() == []
    said = [e["message"] for e in await kube_env.call("GET", "/v1/events?kind=drain", 200)]
    assert said[0] == "w1: cordon and drain", said
    # The evicted ReplicaSet is back (the recovery gate), the last step before Ready.
    assert said[-2:] == ["w1: node w1.lab Ready",
                         "w1: the workloads its drain evicted are available again (1)"], said
    await drainer.close()


async def test_the_node_watch_notes_nodes_gone_not_ready_in_one_commit_and_back(
        kube_env: InProcessCoordinator, kube: KubeApiServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    watch: NodeWatch = kube_env.coordinator.nodes
    await ready_manager(kube_env, kube)
    for worker in ("w1", "w2"):
        agent = await deployed_items(kube_env, worker, "worker")
        with kube.locked() as cluster:
            cluster.add_node(f"{worker}.lab", {MACHINE_ID_LABEL: agent["machine_id"]})
        await kube_env.until(f"{worker} Ready", lambda w=worker: _state(kube_env, w, "Ready"))
    stored = await kube_env.store.get_cluster("lab")
    assert stored is not None and isinstance(kube_env.clock, ManualClock)
    written = commits(kube_env, monkeypatch)

    async def swept(ready: bool) -> None:
        """One due list of the cluster's Nodes, the watch alone (no reconcile pass)."""
        kube_env.clock.now += NODE_HEALTH_SECONDS
        watch.schedule(stored.spec, await kube_env.store.list_machines("lab"))

        async def noted() -> bool:
            return all(m.node is not None and m.node.ready is ready
                       for m in await kube_env.store.list_machines("lab"))

        await wait_until_async(noted, 10, f"the nodes noted {'Ready' if ready else 'NotReady'}")

    with kube.locked() as cluster:
        for node in ("cp-1", "w1.lab", "w2.lab"):
            cluster.set_node_ready(node, False, message="container runtime is down")
    await swept(False)
    assert written == [["m1", "w1", "w2"]], "not one commit for the sweep"
    assert [m["state"] for m in await kube_env.machines()] == ["Ready"] * 3
    assert (await kube_env.machine("m1"))["node"]["message"] == "container runtime is down"
    with kube.locked() as cluster:
        for node in ("cp-1", "w1.lab", "w2.lab"):
            cluster.set_node_ready(node, True)
    await swept(True)
    assert written[1:] == [["m1", "w1", "w2"]]
    said = [e["message"] for e in await kube_env.call("GET", "/v1/events?kind=node", 200)
            if e["hostname"] == "w1"]
    assert said[-2:] == ["w1: node w1.lab not Ready: Ready=False (KubeletNotReady) (container "
                         "runtime is down)", "w1: node w1.lab Ready"]
