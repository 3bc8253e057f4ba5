"""Machines and their Kubernetes Nodes, through the API against the test Kubernetes API
server: a machine whose deploy items are done waits in Deploy until the Node its kubelet
marked registers and is Ready (the status says which, and fails past the timeout, still
waiting); the Node gets the role, cluster and machine labels and the dedicated managers'
taint, kept in step as they change and without touching what others set; a drain goes to
the marked Node whatever its name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.changes import Change
from coordinator.domain.nodes.nodes import (
    MACHINE_ID_LABEL,
    NODE_HEALTH_SECONDS,
    Marked,
    desired_metadata,
    observed,
)
from coordinator.kube import Kube
from tests.integration.api.operator import shown_everywhere
from tests.support.builders import fleet_machine
from tests.support.harness import InProcessCoordinator, ManualClock, in_process_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server

SPEC = """\
name: lab
release: "{release}"
settings:
  kubernetes: {{kubeconfig: {kubeconfig}, nodeReadyTimeoutSeconds: 60, labels: {{tier: edge}},
               dedicatedManagers: {dedicated}}}
  drain: {{timeoutSeconds: 5, evictionRetrySeconds: 0.05}}
machineTypes:
  manager:
    - {{name: kubeadm-init, phase: deploy, action: {{type: exec, argv: [kubeadm, init]}}}}
  worker:
    - {{name: kubeadm-join, phase: deploy, action: {{type: exec, argv: [kubeadm, join]}}}}
    - {{name: kubelet, phase: upgrade, version: "{release}", action: {{type: exec, argv: [apt, install]}}}}
"""
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
WORKER = "node-role.kubernetes.io/worker"


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    with kube_api_server(Cluster()) as server:
        yield server


def spec(kube: KubeApiServer, tmp_path: Path, release: str = "1.0", dedicated: bool = True) -> str:
    return SPEC.format(release=release, kubeconfig=kube.write_kubeconfig(tmp_path / "kubeconfig"),
                       dedicated=str(dedicated).lower())


@pytest.fixture
async def env(tmp_path: Path, kube: KubeApiServer) -> AsyncIterator[InProcessCoordinator]:
    async with in_process_coordinator(tmp_path, spec(kube, tmp_path), clock=ManualClock()) as running:
        yield running


async def deployed_items(env: InProcessCoordinator, hostname: str, role: str,
                         labels: dict[str, str] | None = None) -> dict[str, Any]:
    """hostname registered, approved as role and its deploy items reported applied."""
    agent = await env.register(hostname)
    await env.call("POST", f"/v1/machines/{hostname}/approve", 200,
                   json={"role": role, "labels": labels or {}})

    async def applied() -> bool:
        await env.report_all(agent)
        found = await env.machine(hostname)
        return found["state"] in ("Deploy", "Ready") and found["step"]["status"] != "running" \
            and found["items"] == {"phase": "deploy", "done": 1, "total": 1}

    await env.until(f"{hostname}'s deploy items applied", applied)
    return agent


async def ready_manager(env: InProcessCoordinator, kube: KubeApiServer) -> None:
    """m1 Ready as a manager, its node registered as cp-1."""
    m1 = await deployed_items(env, "m1", "manager")
    with kube.locked() as cluster:
        cluster.add_node("cp-1", {MACHINE_ID_LABEL: m1["machine_id"]})
    await env.until("m1 Ready", lambda: _state(env, "m1", "Ready"))


def node_step(found: dict[str, Any]) -> tuple[str, str, str]:
    return found["state"], found["step"]["status"], found["step"]["node"]


async def stage(env: InProcessCoordinator, name: str) -> dict[str, Any]:
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    return next(s for s in status["stages"] if s["name"] == name)  # type: ignore[no-any-return]


def labels_of(kube: KubeApiServer, node: str) -> dict[str, str]:
    with kube.locked() as cluster:
        return dict(cluster.nodes[node]["metadata"]["labels"])


async def test_a_machine_waits_in_deploy_for_its_node_to_register_then_to_become_ready(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agent = await deployed_items(env, "m1", "manager")
    waiting = ("Deploy", "waiting", "waiting for node m1 to register")
    await env.until("m1 waiting for its node", lambda: _is(env, "m1", waiting))
    assert (await stage(env, "nodes"))["message"].startswith(
        "0 of 1 nodes Ready; m1: waiting for node m1 to register (")

    with kube.locked() as cluster:  # its kubelet registers under another name, NotReady
        cluster.add_node("m1.lab.example", {MACHINE_ID_LABEL: agent["machine_id"]})
        cluster.set_node_ready("m1.lab.example", False, message="container runtime network not ready")
    not_ready = ("Deploy", "waiting", "waiting for node m1.lab.example to become Ready: "
                 "Ready=False (KubeletNotReady) (container runtime network not ready)")
    await env.until("m1 waiting for its node to be Ready", lambda: _is(env, "m1", not_ready))
    found = await env.machine("m1")
    assert (found["node"]["name"], found["node"]["ready"]) == ("m1.lab.example", False)
    assert f"1/1     {not_ready[2]} (" in await env.cli("machines")
    await shown_everywhere(env, "m1", not_ready[2], (
        "check the kubelet on m1 (journalctl -u kubelet) and `kubectl describe node "
        "m1.lab.example` (its CNI, its conditions); the machine goes Ready once its node is"))

    with kube.locked() as cluster:
        cluster.set_node_ready("m1.lab.example", True)
    await env.until("m1 Ready", lambda: _state(env, "m1", "Ready"))
    found = await env.machine("m1")
    assert (found["node"]["name"], found["node"]["ready"]) == ("m1.lab.example", True)
    assert "node       m1.lab.example Ready\n" in await env.cli("machines", "get", "m1")
    assert (await stage(env, "nodes"))["state"] == "done"
    events = [e["message"] for e in await env.call("GET", "/v1/events?kind=node", 200)]
    assert events == ["m1: node m1.lab.example registered: Ready=False (KubeletNotReady) "
                      "(container runtime network not ready)", "m1: node m1.lab.example Ready"]


async def test_past_the_timeout_the_wait_shows_failing_and_goes_on(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agent = await deployed_items(env, "m1", "manager")
    await env.until("m1 looked for", lambda: _has_node_record(env, "m1"))
    assert isinstance(env.clock, ManualClock)
    env.clock.now += 61
    found = await env.machine("m1")
    assert (found["state"], found["step"]["status"]) == ("Deploy", "failed")
    assert found["step"]["error"] == "waiting for node m1 to register (61s); still waiting"
    nodes = await stage(env, "nodes")
    assert (nodes["state"], nodes["message"]) == (
        "failing", "0 of 1 nodes Ready; m1: waiting for node m1 to register (61s; still waiting)")

    with kube.locked() as cluster:
        cluster.add_node("m1", {MACHINE_ID_LABEL: agent["machine_id"]})
    await env.until("m1 Ready once its node is", lambda: _state(env, "m1", "Ready"))


async def test_the_node_carries_role_cluster_and_machine_labels_kept_in_step(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    await ready_manager(env, kube)
    w1 = await deployed_items(env, "w1", "worker", {"zone": "eu-1a", "rack": "r7"})
    with kube.locked() as cluster:  # someone else's label, set before the coordinator's
        cluster.add_node("worker-1", {MACHINE_ID_LABEL: w1["machine_id"], "team": "db"})
    await env.until("w1 Ready", lambda: _state(env, "w1", "Ready"))

    assert labels_of(kube, "cp-1")[CONTROL_PLANE] == "" and CONTROL_PLANE not in labels_of(kube, "worker-1")
    assert {k: v for k, v in labels_of(kube, "worker-1").items() if k != MACHINE_ID_LABEL
            and k != "kubernetes.io/hostname"} == {
        WORKER: "", "tier": "edge", "zone": "eu-1a", "rack": "r7", "team": "db"}
    assert kube.cluster.nodes["cp-1"]["spec"]["taints"] == [
        {"key": CONTROL_PLANE, "effect": "NoSchedule"}]
    assert "taints" not in kube.cluster.nodes["worker-1"]["spec"]

    await env.call("PATCH", "/v1/machines/w1/labels", 200,
                   json={"set": {"zone": "eu-1b"}, "remove": ["rack"]})

    async def relabelled() -> bool:
        labels = labels_of(kube, "worker-1")
        return labels.get("zone") == "eu-1b" and "rack" not in labels

    await env.until("worker-1 relabelled", relabelled)
    assert labels_of(kube, "worker-1")["team"] == "db", "a label the coordinator did not set went"

    await env.call("PUT", "/v1/clusters", 200, data=spec(kube, tmp_path, dedicated=False))

    async def untainted() -> bool:
        with kube.locked() as cluster:
            return not cluster.nodes["cp-1"]["spec"].get("taints")

    await env.until("cp-1 untainted", untainted)


async def test_a_drain_goes_to_the_marked_node_not_the_one_named_like_the_machine(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    await ready_manager(env, kube)
    w1 = await deployed_items(env, "w1", "worker")
    with kube.locked() as cluster:
        cluster.add_node("w1")  # another machine's node, named like w1
        cluster.add_node("node-17", {MACHINE_ID_LABEL: w1["machine_id"]})
        cluster.add_replicaset("default", "web", 2, {"app": "web"}, nodes=["w1", "node-17"])
    await env.until("w1 Ready", lambda: _state(env, "w1", "Ready"))
    assert (await env.machine("w1"))["node"]["name"] == "node-17"

    await env.call("PUT", "/v1/clusters", 200, data=spec(kube, tmp_path, "2.0"))

    async def drained() -> bool:
        found = await env.machine("w1")
        return bool(found["drain"] and found["drain"]["stage"] == "Drained")

    await env.until("w1 drained", drained)
    with kube.locked() as cluster:
        assert cluster.cordoned() == ["node-17"]
        assert cluster.pods_on("node-17") == [] and len(cluster.pods_on("w1")) >= 1

    async def upgraded() -> bool:
        await env.report_all(w1)
        found = await env.machine("w1")
        return bool(found["state"] == "Ready" and found["release"] == "2.0")

    await env.until("w1 upgraded", upgraded)
    assert kube.cluster.uncordons == ["node-17"]


async def _is(env: InProcessCoordinator, hostname: str, expected: tuple[str, str, str]) -> bool:
    return node_step(await env.machine(hostname)) == expected


async def _state(env: InProcessCoordinator, hostname: str, state: str) -> bool:
    return bool((await env.machine(hostname))["state"] == state)


async def _has_node_record(env: InProcessCoordinator, hostname: str) -> bool:
    return (await env.machine(hostname))["node"] is not None


async def test_the_cluster_is_ready_once_kube_system_workloads_are_available(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    with kube.locked() as cluster:
        cluster.add_deployment("kube-system", "coredns", replicas=2, available=1)
        cluster.add_daemonset("kube-system", "calico-node", {"k8s-app": "calico-node"})
    await ready_manager(env, kube)
    with kube.locked() as cluster:
        [calico] = [p for p in cluster.pods_on("cp-1") if "calico-node" in p]
        cluster.set_pod_ready(*calico.split("/"), False)

    async def ready_says(state: str, message: str) -> bool:
        ready = await stage(env, "ready")
        return bool((ready["state"], ready["message"]) == (state, message))

    await env.until("ready waits on kube-system", lambda: ready_says(
        "in-progress", "1 of 1 Ready; kube-system: deployment coredns 1/2 available, "
        "daemonset calico-node 0/1"))
    with kube.locked() as cluster:
        cluster.add_deployment("kube-system", "coredns", replicas=2, available=2)
        cluster.set_pod_ready(*calico.split("/"), True)
    await env.until("ready done", lambda: ready_says("done", "1 of 1 Ready"))


async def test_a_ready_machines_node_gone_not_ready_or_deleted_fails_the_nodes_stage(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    await ready_manager(env, kube)
    for worker, node in (("w1", "node-7"), ("w2", "node-8")):  # one stands in for idle workers
        agent = await deployed_items(env, worker, "worker")
        with kube.locked() as cluster:
            cluster.add_node(node, {MACHINE_ID_LABEL: agent["machine_id"]})
        await env.until(f"{worker} Ready", lambda w=worker: _state(env, w, "Ready"))
    assert (await stage(env, "nodes"))["state"] == "done"
    with kube.locked() as cluster:  # their kubelets stop posting
        for node in ("cp-1", "node-7", "node-8"):
            cluster.set_node_ready(node, False, reason="NodeStatusUnknown",
                                   message="Kubelet stopped posting node status.")
    assert isinstance(env.clock, ManualClock)
    env.clock.now += NODE_HEALTH_SECONDS  # their next looks are due
    since = "NotReady since 1970-01-12T13:47:10Z: Ready=False (NodeStatusUnknown) (Kubelet " \
        "stopped posting node status.)"
    text = f"node cp-1 {since}"

    async def nodes_say(state: str, message: str) -> bool:
        found = await stage(env, "nodes")
        return bool((found["state"], found["message"]) == (state, message))

    await env.until("nodes failing", lambda: nodes_say(
        "failing", f"0 of 3 nodes Ready; m1: {text}; w1: node node-7 {since}; w2: node node-8 "
        f"{since}"))
    assert [(await env.machine(h))["state"] for h in ("m1", "w1", "w2")] == ["Ready"] * 3
    await shown_everywhere(env, "m1", text, (
        "check the kubelet on m1 (journalctl -u kubelet) and `kubectl describe node cp-1`; the "
        "status clears once its node is Ready again"))

    with kube.locked() as cluster:
        for node in ("cp-1", "node-7", "node-8"):
            cluster.set_node_ready(node, True)
    env.clock.now += NODE_HEALTH_SECONDS
    await env.until("nodes done again", lambda: nodes_say("done", "3 of 3 nodes Ready"))

    with kube.locked() as cluster:
        del cluster.nodes["cp-1"]
    env.clock.now += NODE_HEALTH_SECONDS
    await env.until("nodes failing, node gone", lambda: nodes_say(
        "failing", "2 of 3 nodes Ready; m1: node gone since 1970-01-12T13:48:10Z: no Node carries "
        "the mark of m1"))
    events = [e["message"] for e in await env.call("GET", "/v1/events?kind=node", 200)
              if e["message"].startswith("m1")]
    assert events[-3:] == ["m1: node cp-1 not Ready: Ready=False (NodeStatusUnknown) (Kubelet "
                           "stopped posting node status.)", "m1: node cp-1 Ready",
                           "m1: node cp-1 is gone"]


async def settled_fleet(env: InProcessCoordinator, kube: KubeApiServer, count: int) -> None:
    """count Ready workers (node-00000...) written as the coordinator leaves them once their
    Nodes were found Ready, each Node marked with its machine's id."""
    stored = await env.store.get_cluster("lab")
    assert stored is not None
    spec, now = stored.spec, env.clock()
    done = frozenset(i.fingerprint() for phase in ("prepare", "deploy", "upgrade")
                     for i in spec.items("worker", phase))
    fleet = []
    for index in range(count):
        m = replace(fleet_machine(index, "lab"), release=spec.release, applied=done,
                    last_seen=now + 10 * NODE_HEALTH_SECONDS)  # they answer all along: idle
        fleet.append(replace(m, node=observed(None, now, m.hostname, ("True", "KubeletReady", ""),
                                              desired_metadata(spec, m).digest())))
    await env.coordinator.writes.apply(Change(machines=fleet))
    with kube.locked() as cluster:
        for m in fleet:
            cluster.add_node(m.hostname, {MACHINE_ID_LABEL: m.id})


async def test_a_settled_clusters_nodes_cost_one_list_per_interval_not_a_look_per_machine(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    await settled_fleet(env, kube, 50)
    await env.coordinator.reconciler.reconcile_once()
    with kube.locked() as cluster:
        cluster.calls.clear()
    assert isinstance(env.clock, ManualClock)
    for index in range(3):  # each interval one of them goes NotReady: the look still finds it
        node = f"node-{index:05d}"
        with kube.locked() as cluster:
            cluster.set_node_ready(node, False, message="container runtime is down")
        env.clock.now += NODE_HEALTH_SECONDS

        async def found_down(node: str = node) -> bool:
            return (await env.machine(node))["node"]["ready"] is False

        await env.until(f"{node} found NotReady", found_down)
    with kube.locked() as cluster:
        calls = [c for c in cluster.calls if "/nodes" in c]
    assert calls == [f"GET /api/v1/nodes?labelSelector={MACHINE_ID_LABEL}&limit=500"] * 3, \
        calls[:5]
    assert [(await env.machine(f"node-{i:05d}"))["state"] for i in range(4)] == ["Ready"] * 4


async def test_the_marked_nodes_are_listed_in_pages(kube: KubeApiServer) -> None:
    with kube.locked() as cluster:
        for index in range(1_100):
            cluster.add_node(f"n{index:05d}", {MACHINE_ID_LABEL: f"m-{index}"})
        cluster.add_node("unmarked")
        cluster.add_node("by-provider", provider_id="nodeagent://lab/m-p")
        cluster.calls.clear()
    async with await Kube.connect(text=kube.kubeconfig()) as client:
        marked = await client.marked_nodes("lab")
        assert len(marked) == 1_100 and marked["m-7"] == Marked("n00007", ("True", "KubeletReady", ""))
        with kube.locked() as cluster:
            assert len(cluster.calls) == 3  # 500, 500, 100
        assert len(await client.marked_nodes("lab", every=True)) == 1_101


async def test_no_manager_upgrades_while_a_managers_node_is_found_down(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    """The upgrade waits, saying why in its plan, and goes on once the Node is Ready again."""
    await ready_manager(env, kube)
    with kube.locked() as cluster:
        cluster.set_node_ready("cp-1", False, reason="NodeStatusUnknown")
    assert isinstance(env.clock, ManualClock)
    env.clock.now += NODE_HEALTH_SECONDS
    await env.until("m1's node found down",
                    lambda: _has((stage(env, "nodes")), "state", "failing"))
    upgraded = spec(kube, tmp_path, "2.0").replace(
        "    - {name: kubeadm-init", "    - {name: kubeadm-upgrade, phase: upgrade, version: "
        "\"2.0\", action: {type: exec, argv: [kubeadm, upgrade]}}\n    - {name: kubeadm-init")
    await env.call("PUT", "/v1/clusters", 200, data=upgraded,
                   headers={**env.admin, "Content-Type": "application/yaml"})
    await env.heartbeat(env.agents["m1"])
    for _ in range(3):
        await env.coordinator.reconciler.reconcile_once()
    m1 = await env.machine("m1")
    assert (m1["state"], m1["responding"]) == ("Ready", True)
    plan = await env.call("GET", "/v1/clusters/lab/upgrade-plan", 200)
    assert [(w["hostname"], w["reason"]) for w in plan["waiting"]] == [
        ("m1", "the Node of manager m1 is down")]

    with kube.locked() as cluster:
        cluster.set_node_ready("cp-1", True)
    env.clock.now += NODE_HEALTH_SECONDS

    async def upgrading() -> bool:
        await env.heartbeat(env.agents["m1"])  # it answers all along
        return await _state(env, "m1", "Upgrade")

    await env.until("m1 in Upgrade", upgrading)


async def _has(found: Awaitable[dict[str, Any]], key: str, value: str) -> bool:
    return (await found)[key] == value
