"""Upgrades through the API and CLI, against a real SQLite store and the test Kubernetes API
server: the dry-run plan, pause/resume, a drain blocked by a budget that leaves its machine
cordoned in Upgrade naming the pod and budget, and the operator's retry, force and skip."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from coordinator.domain.model import NO_ACCESS_DRAINS_SKIPPED
from coordinator.domain.nodes.maintenance import MAINTENANCE_ANNOTATION
from coordinator.metrics import METRICS
from tests.integration.api.operator import flat, machine, shown_everywhere
from tests.support.harness import InProcessCoordinator, ManualClock, in_process_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.ports import free_port

SPEC = """\
name: lab
release: "{release}"
settings:
  upgrade: {{workerBatchSize: 1}}
  drain: {{timeoutSeconds: 1, evictionRetrySeconds: 0.05, recoveryTimeoutSeconds: 2}}
{kubernetes}machineTypes:
  manager:
    - {{name: control-plane, phase: deploy, action: {{type: exec, argv: ["true"]}}{reported}}}
{upgrade_manager}  worker:
    - {{name: join, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
{upgrade_worker}"""
UPGRADE = ('    - {{name: kubelet-{role}, phase: upgrade, '
           'action: {{type: exec, argv: ["true", "{release}"]}}}}\n')


def spec(kubeconfig: Path | None, release: str = "1.0") -> str:
    """With kubeconfig, the cluster setting names it; without, the first manager's deploy
    item reports the one it leaves in /etc/kubernetes/admin.conf."""
    upgrades = {f"upgrade_{role}": UPGRADE.format(role=role, release=release) if release != "1.0"
                else "" for role in ("manager", "worker")}
    return SPEC.format(
        release=release, **upgrades,
        kubernetes=f"  kubernetes: {{kubeconfig: {kubeconfig}}}\n" if kubeconfig else "",
        reported="" if kubeconfig else ", kubeconfigFrom: /etc/kubernetes/admin.conf")


def budgeted() -> Cluster:
    """Nodes m1, w1 and w2; on w1 and w2 a pod each of a ReplicaSet whose budget wants both
    available: the workers' drains block until the operator answers."""
    cluster = Cluster(ready_delay=3600)  # replacements never get Ready: budgets stay tight
    for node in ("m1", "w1", "w2"):
        cluster.add_node(node)
    cluster.add_daemonset("kube-system", "proxy", {"app": "proxy"})
    cluster.add_replicaset("default", "web", 2, {"app": "web"}, nodes=["w1", "w2"])
    cluster.add_pdb("default", "web", {"app": "web"}, min_available=2)
    return cluster


def web_on_two_workers(ready_delay: float = 0.0) -> Cluster:
    """Nodes m1, w1 and w2; ReplicaSet web's two pods on w1 and w2, no budget; replacements
    Ready after ready_delay."""
    cluster = Cluster(ready_delay=ready_delay)
    for node in ("m1", "w1", "w2"):
        cluster.add_node(node)
    cluster.add_replicaset("default", "web", 2, {"app": "web"}, nodes=["w1", "w2"])
    return cluster


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    with kube_api_server(budgeted()) as server:
        yield server


@pytest.fixture
async def env(tmp_path: Path, kube: KubeApiServer) -> AsyncIterator[InProcessCoordinator]:
    # The real clock: drains time out for real.
    async with in_process_coordinator(tmp_path, spec(kube.write_kubeconfig(tmp_path / "kubeconfig")),
                                      clock=time.time) as running:
        yield running


Agents = dict[str, dict[str, str]]


async def rolled_out(env: InProcessCoordinator, kube: KubeApiServer,
                     kubeconfig: str | None = None) -> Agents:
    """m1 (manager), w1 and w2 (workers) registered, approved and Ready, each node of the test
    server marked with its machine's id; m1's agent reports kubeconfig for its item with
    kubeconfigFrom."""
    agents = {}
    for hostname, role in (("m1", "manager"), ("w1", "worker"), ("w2", "worker")):
        agents[hostname] = await env.register(hostname)
        with kube.locked() as cluster:
            cluster.mark_node(hostname, agents[hostname]["machine_id"])
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})

    async def agents_apply() -> bool:
        for agent in agents.values():
            await env.report_all(agent, kubeconfig)
        status = await env.call("GET", "/v1/clusters/lab/status", 200)
        return status["counts"] == {"Ready": 3}

    await env.until("the rollout", agents_apply)
    return agents


async def upgraded(env: InProcessCoordinator, agents: Agents, hostname: str) -> bool:
    """Whether hostname is Ready at release 2.0, its agent applying what it is given."""
    await env.report_all(agents[hostname])
    found = await machine(env, hostname)
    return found["state"] == "Ready" and found["release"] == "2.0"


async def test_an_upgrade_with_a_blocked_drain_and_the_operators_answers(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    agents = await rolled_out(env, kube)
    new_spec = tmp_path / "v2.yaml"
    new_spec.write_text(spec(tmp_path / "kubeconfig", "2.0"))

    reader = (await env.call("POST", "/v1/admin-tokens", 201,
                             json={"name": "viewer", "role": "read-only"}))["token"]
    plan = await env.cli("upgrade", "plan", "lab", "-f", str(new_spec), token=reader)
    web = {n: next(p for p in kube.cluster.pods_on(n) if p.startswith("default/web-"))
           for n in ("w1", "w2")}

    def blocks(node: str) -> str:
        return (f"          blocks: budget default/web allows no disruption now (minAvailable 2,"
                f" 2 of 2 pods healthy): it holds {web[node]}; remedy: scale the workload up or "
                "relax budget default/web before the upgrade; or, once blocked, coordinator "
                "upgrade force (bypasses the budget)")

    assert plan.splitlines()[1:] == [
        "step 1: m1 (manager, from 1.0) runs upgrade/kubelet-manager",
        "          drain of node m1: evicts 0 pods",
        "step 2: w1 (worker, from 1.0) runs upgrade/kubelet-worker",
        f"          drain of node w1: evicts 1 pod: {web['w1']}", blocks("w1"),
        "step 3: w2 (worker, from 1.0) runs upgrade/kubelet-worker",
        f"          drain of node w2: evicts 1 pod: {web['w2']}", blocks("w2")]
    planned = json.loads(await env.cli("upgrade", "plan", "lab", "-f", str(new_spec),
                                       "--output", "json", token=reader))
    w1_drain = planned["steps"][1][0]["drain"]
    assert (w1_drain["node"], w1_drain["evicted"], w1_drain["blocked"]) == (
        "w1", [web["w1"]], True)
    assert [h["severity"] for h in w1_drain["hindrances"]] == ["blocks"]
    assert (await env.cli("upgrade", "plan", "lab", token=reader)).splitlines() == [
        "upgrade of lab to release 1.0", "nothing to upgrade"]
    assert (await machine(env, "m1"))["release"] == "1.0", "the dry run changed something"

    await env.cli("upgrade", "pause", "lab")
    await env.call("PUT", "/v1/clusters", 200, data=new_spec.read_text().replace(
        "settings:\n", "settings:\n  upgrade: {workerBatchSize: 1, paused: true}\n", 1)
        .replace("  upgrade: {workerBatchSize: 1}\n", "", 1))
    await env.coordinator.reconciler.reconcile_once()
    assert (await machine(env, "m1"))["state"] == "Ready", "a paused upgrade started"
    assert "paused" in await env.cli("upgrade", "plan", "lab")
    # Every machine Ready at 1.0: the cluster is not ready at 2.0, and each view says why.
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert (status["rollout"]["held"], status["rollout"]["eta_seconds"]) == (
        "stalled: upgrades are paused (coordinator upgrade resume lab)", None)
    assert "ETA none, stalled: upgrades are paused" in await env.cli("status", "lab")
    ready = status["stages"][-1]
    assert (ready["state"], ready["message"]) == ("waiting", (
        "3 of 3 Ready; upgrades are paused: m1, w1, w2 to upgrade to release 2.0 "
        "(coordinator upgrade resume lab)"))
    await shown_everywhere(env, "w1", "the upgrade from release 1.0 to 2.0 waits: upgrades are "
                           "paused", "coordinator upgrade resume lab (coordinator upgrade plan "
                           "lab shows what it runs)")
    await env.cli("upgrade", "resume", "lab")

    await env.until("m1 upgraded", lambda: upgraded(env, agents, "m1"))
    assert "m1" not in kube.cluster.cordoned()

    async def blocked(hostname: str, attempt: int) -> bool:
        drain = (await machine(env, hostname))["drain"]
        return bool(drain) and drain["stage"] == "Blocked" and drain["attempt"] == attempt

    def drain_count(outcome: str) -> float:
        return METRICS.registry.get_sample_value(
            "nodeagent_drain_duration_seconds_count", {"cluster": "lab", "outcome": outcome}) or 0

    def refusals() -> float:
        return METRICS.registry.get_sample_value(
            "nodeagent_evictions_blocked_total", {"cluster": "lab"}) or 0

    before = {o: drain_count(o) for o in ("drained", "forced", "timed-out")}
    refused_before = refusals()

    await env.until("w1's drain blocked", lambda: blocked("w1", 1))
    w1 = await machine(env, "w1")
    assert w1["state"] == "Upgrade"
    assert w1["drain"]["blocking_budgets"] == ["default/web"]
    [pod] = w1["drain"]["blocking_pods"]
    assert pod in kube.cluster.pods_on("w1") and kube.cluster.cordoned() == ["w1"]
    assert (await env.assignment(agents["w1"]))["items"] == [], "upgrade items ran undrained"
    await shown_everywhere(env, "w1", "drain Blocked (attempt 1, cordoned for ", (
        "relax budget default/web or move its pods, then coordinator upgrade retry|skip|force "
        "w1 (retry: drain again with a new timeout; skip: upgrade with the pods left on the "
        "node; force: delete the pods, bypassing their budgets)"))
    note = (await machine(env, "w1"))["note"]
    assert f"{pod} (budget default/web)" in note["text"]
    assert note["failing"] and note["actions"] == ["drain/retry", "drain/skip", "drain/force"]

    await env.cli("upgrade", "retry", "w1")
    await env.until("w1's retried drain blocked", lambda: blocked("w1", 2))
    assert kube.cluster.min_healthy["default/web"] == 2, "the budget was violated"

    await env.cli("upgrade", "force", "w1")
    await env.until("w1 upgraded", lambda: upgraded(env, agents, "w1"))
    assert kube.cluster.min_healthy["default/web"] == 1  # forced: the budget was bypassed
    assert pod not in kube.cluster.pods_on("w1")

    await env.until("w2's drain blocked", lambda: blocked("w2", 1))
    await env.cli("upgrade", "skip", "w2")
    await env.until("w2 upgraded", lambda: upgraded(env, agents, "w2"))
    assert kube.cluster.cordoned() == []
    assert any(p.startswith("default/web-") for p in kube.cluster.pods_on("w2")), \
        "a skipped drain still evicted the pod"
    # /metrics: each attempt's outcome and every refusal the budget gave
    assert drain_count("timed-out") - before["timed-out"] == 3  # w1 twice, w2 once
    assert drain_count("forced") - before["forced"] == 1
    assert refusals() - refused_before >= 3
    events = await env.call("GET", "/v1/events?cluster=lab", 200)
    drains = [e["message"] for e in events if e["kind"] == "drain"]
    assert any("w1 drain blocked (still held and cordoned)" in m and "budget default/web" in m
               for m in drains), drains
    assert json.dumps(drains).count("operator chose") == 3


async def test_an_upgrade_leaves_an_operators_cordon_and_waits_for_another_tools_hold(
        tmp_path: Path) -> None:
    """w1 was cordoned by an operator before the upgrade: drained and upgraded, it stays
    cordoned. w2 is held by another tool (domain/nodes/maintenance.py): it is neither cordoned
    nor drained, and its note names the holder, until the hold is released."""
    with kube_api_server(web_on_two_workers()) as kube:
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        slow = spec(kubeconfig).replace("timeoutSeconds: 1,", "timeoutSeconds: 60,")
        async with in_process_coordinator(tmp_path, slow, clock=time.time) as env:
            agents = await rolled_out(env, kube)
            with kube.locked() as nodes:
                nodes.cordon("w1")
                nodes.nodes["w2"]["metadata"].setdefault("annotations", {})[
                    MAINTENANCE_ANNOTATION] = json.dumps({"holder": "ops-team"})
            await env.call("PUT", "/v1/clusters", 200, data=spec(kubeconfig, "2.0").replace(
                "timeoutSeconds: 1,", "timeoutSeconds: 60,"))
            await env.until("m1 and w1 upgraded", lambda: all_upgraded(env, agents, "m1", "w1"))
            drains = [e["message"] for e in await env.call("GET", "/v1/events?kind=drain", 200)
                      if e["hostname"] == "w1"]
            assert "w1: left cordoned: node w1 was unschedulable before the drain" in drains
            assert kube.cluster.cordoned() == ["w1"]

            async def waits_for_the_holder() -> bool:
                drain = (await machine(env, "w2"))["drain"] or {}
                return "held by ops-team" in drain.get("message", "")

            await env.until("w2 waits for ops-team", waits_for_the_holder)
            evicted = len(kube.cluster.evictions)
            await shown_everywhere(env, "w2", "drain Draining (attempt 1, ", (
                "the drain begins once ops-team lets go of the node (its nodeagent.io/maintenance"
                " annotation removed, or kured's reboot done): wait; or coordinator upgrade skip "
                "w2 to upgrade undrained"))
            assert "waiting for node w2, held by ops-team: not cordoned" in \
                (await machine(env, "w2"))["note"]["text"]
            assert kube.cluster.cordoned() == ["w1"], "a node another tool holds was cordoned"
            assert len(kube.cluster.evictions) == evicted, "w2 was drained while held"
            with kube.locked() as nodes:
                del nodes.nodes["w2"]["metadata"]["annotations"][MAINTENANCE_ANNOTATION]
            await env.until("w2 upgraded", lambda: all_upgraded(env, agents, "w2"))
            assert len(kube.cluster.evictions) > evicted
            assert kube.cluster.cordoned() == ["w1"]
            assert MAINTENANCE_ANNOTATION not in kube.cluster.nodes["w2"]["metadata"][
                "annotations"]


async def test_the_next_node_is_drained_only_once_the_workloads_evicted_before_are_back(
        tmp_path: Path) -> None:
    """w1's drain evicts a pod of ReplicaSet web, whose replacement takes 3 s to be Ready: w1
    stays in Upgrade, its note naming what is not back, and w2 is not drained until web has
    its two replicas again (drain.recoveryTimeoutSeconds)."""
    with kube_api_server(web_on_two_workers(ready_delay=3.0)) as kube:
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        gated = spec(kubeconfig).replace("recoveryTimeoutSeconds: 2", "recoveryTimeoutSeconds: 60")
        async with in_process_coordinator(tmp_path, gated, clock=time.time) as env:
            agents = await rolled_out(env, kube)
            await env.call("PUT", "/v1/clusters", 200, data=spec(kubeconfig, "2.0").replace(
                "recoveryTimeoutSeconds: 2", "recoveryTimeoutSeconds: 60"))

            async def w1_waits_for_web() -> bool:
                await env.report_all(agents["m1"])
                await env.report_all(agents["w1"])
                return "waiting for the workloads its drain evicted: ReplicaSet default/web: 1 " \
                       "of 2 ready" in (await machine(env, "w1"))["note"]["text"]

            await env.until("w1 waits for web", w1_waits_for_web)
            assert (await machine(env, "w1"))["state"] == "Upgrade"
            assert kube.cluster.cordoned() == [], "w2 was drained while web was short"
            await env.until("w1 upgraded", lambda: upgraded(env, agents, "w1"))
            await env.until("w2 upgraded", lambda: upgraded(env, agents, "w2"))
            events = await env.call("GET", "/v1/events?cluster=lab&kind=drain", 200)
    said = [e["message"] for e in sorted(events, key=lambda e: e["id"])]
    back = said.index("w1: the workloads its drain evicted are available again (1)")
    assert back < said.index("w2: cordon and drain"), said


async def all_upgraded(env: InProcessCoordinator, agents: Agents, *hostnames: str) -> bool:
    return all([await upgraded(env, agents, h) for h in hostnames])


async def test_drain_actions_refuse_machines_without_a_drain(env: InProcessCoordinator) -> None:
    await env.register("w9")
    body = await env.call("POST", "/v1/machines/w9/drain/skip", 409)
    assert "no drain to skip" in body["error"]
    await env.call("POST", "/v1/machines/w9/drain/explode", 404)


async def test_a_kubeconfig_the_first_manager_reports_is_used_to_drain_and_never_shown(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=spec(None))
    agents = await rolled_out(env, kube, kube.kubeconfig())
    events = await env.call("GET", "/v1/events?cluster=lab&kind=kubeconfig", 200)
    assert [(e["hostname"], e["message"].split(":")[0]) for e in events] == [
        ("m1", "m1 reported a kubeconfig (item control-plane, /etc/kubernetes/admin.conf)")]

    await env.call("PUT", "/v1/clusters", 200, data=spec(None, "2.0"))
    await env.until("m1 upgraded", lambda: upgraded(env, agents, "m1"))
    await env.until("w1's drain blocked by the budget", lambda: _stage(env, "w1", "Blocked"))
    assert kube.cluster.cordoned() == ["w1"]
    w1 = await machine(env, "w1")
    assert w1["drain"]["blocking_budgets"] == ["default/web"], w1["drain"]
    assert kube.cluster.refusals > 0, "no eviction reached the API server"
    drained = [e for e in await env.call("GET", "/v1/events?kind=drain", 200)
               if e["hostname"] == "m1" and "drained" in e["message"]]
    assert drained, "m1 was not drained through the reported kubeconfig"

    seen = json.dumps([await env.call("GET", path, 200) for path in (
        "/v1/events", "/v1/machines", "/v1/machines/m1", "/v1/clusters/lab/status",
        "/v1/clusters/lab")])
    assert kube.token not in seen and "admin.conf" in seen


async def _stage(env: InProcessCoordinator, hostname: str, stage: str) -> bool:
    drain = (await machine(env, hostname))["drain"]
    return bool(drain) and drain["stage"] == stage


async def test_a_report_refuses_or_reports_a_kubeconfig_it_cannot_use(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=spec(None))
    m1 = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.until("m1 deploying", lambda: _assigned(env, m1, "deploy"))
    await env.report_all(m1, "clusters: [this is not: a kubeconfig")
    [event] = await env.call("GET", "/v1/events?kind=kubeconfig", 200)
    assert event["message"] == ("m1: the kubeconfig item control-plane left in "
                                "/etc/kubernetes/admin.conf is not usable: not YAML (line 1)")
    await env.coordinator.reconciler.reconcile_once()
    found = await machine(env, "m1")
    assert found["items"] == {"phase": "deploy", "done": 1, "total": 1}, \
        "the item did not count as applied"
    # Without a usable kubeconfig its Node cannot be seen: it waits in Deploy, saying why.
    await env.until("m1 waiting for a kubeconfig", lambda: _node_says(
        env, "m1", "waiting for node m1 to register (cannot look: no kubeconfig: "
        "settings.kubernetes.kubeconfig is not set and no manager reported one "
        "(kubeconfigFrom on a manager item))"))
    assert (await machine(env, "m1"))["state"] == "Deploy"
    with kube.locked() as cluster:
        cluster.mark_node("m1", m1["machine_id"])
    await env.report_all(m1, kube.kubeconfig())  # the item's file, readable this time
    await env.until("m1 Ready", lambda: _state(env, "m1", "Ready"))

    w1 = await env.register("w1")
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    await env.until("w1 deploying", lambda: _assigned(env, w1, "deploy"))
    [join] = (await env.assignment(w1))["items"]
    answer = await env.report(w1, join, "deploy", expect=409, kubeconfig=kube.kubeconfig())
    assert answer["error"].startswith("kubeconfig: item join is not a manager item")


async def _node_says(env: InProcessCoordinator, hostname: str, text: str) -> bool:
    return bool((await machine(env, hostname))["step"]["node"] == text)


async def _state(env: InProcessCoordinator, hostname: str, state: str) -> bool:
    return bool((await machine(env, hostname))["state"] == state)


async def _assigned(env: InProcessCoordinator, agent: dict[str, str], phase: str) -> bool:
    return bool((await env.assignment(agent))["phase"] == phase)


HELM_CONTROLLER = ('    - {name: helm-controller, phase: postdeploy, version: "0.15.0", '
                   'versionCommand: [helm-controller, --version], '
                   'action: {type: exec, argv: [helm, upgrade, --install]}}\n')


def with_post_deploy(text: str) -> str:
    """The spec with a post-deploy item whose installed version is checked, drains off."""
    return text.replace("  worker:\n", HELM_CONTROLLER + "  worker:\n").replace(
        "drain: {", "drain: {enabled: false, ")


async def test_the_post_deploy_version_is_verified_and_again_after_every_upgrade(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    agents = await rolled_out(env, kube)
    await env.call("PUT", "/v1/clusters", 200, data=with_post_deploy(spec(kubeconfig)))
    await env.coordinator.reconciler.reconcile_once()
    assignment = await env.assignment(agents["m1"])
    install, check = assignment["items"]
    assert (assignment["phase"], check["name"], check["action"]["expect"]) == (
        "postdeploy", "helm-controller.version", "0.15.0")

    await env.report(agents["m1"], install, "postdeploy")
    await env.report(agents["m1"], check, "postdeploy", "failed", exit_code=0,
                     output="helm-controller\n0.14.0\n", next_retry_at=9e9,
                     error="installed version '0.14.0', declared '0.15.0'")
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert status["post_deploy"] == {
        "items": 1, "running_on": "m1", "failing": "m1: helm-controller.version failing "
        "(attempt 1): installed version '0.14.0', declared '0.15.0'"}
    assert "post-deploy step: m1: helm-controller.version failing (attempt 1): installed " \
        "version '0.14.0', declared '0.15.0'" in " ".join((await env.cli("status", "lab")).split())
    [mismatch] = await env.call("GET", "/v1/events?kind=post-deploy&order=desc&limit=1", 200)
    assert mismatch["message"] == (
        "post-deploy check helm-controller.version failed on m1 at release 1.0 (attempt 1): "
        "installed version '0.14.0', declared '0.15.0'")
    assert (mismatch["data"]["installed"], mismatch["data"]["declared"]) == ("0.14.0", "0.15.0")

    await env.report(agents["m1"], check, "postdeploy", exit_code=0, output="0.15.0\n")
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert status["post_deploy"] == {"items": 1, "running_on": None, "failing": None}

    await env.call("PUT", "/v1/clusters", 200, data=with_post_deploy(spec(kubeconfig, "2.0")))
    for hostname in agents:
        await env.until(f"{hostname} upgraded", lambda h=hostname: upgraded(env, agents, h))
    await env.coordinator.reconciler.reconcile_once()
    again = await env.assignment(agents["m1"])
    assert again["phase"] == "postdeploy", "the upgrade was not followed by a post-deploy check"
    assert again["items"][0] == install, "the unchanged install item changed"
    assert again["items"][1]["version"] == "0.15.0+release.2.0"
    await env.report_all(agents["m1"])
    events = await env.call("GET", "/v1/events?kind=post-deploy", 200)
    verified = [e["message"] for e in events if e["data"].get("verified")]
    assert verified == ["post-deploy step verified on m1 at release 1.0: helm-controller 0.15.0",
                        "post-deploy step verified on m1 at release 2.0: helm-controller 0.15.0"]
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.assignment(agents["m1"]))["phase"] is None


async def test_an_upgraded_node_that_is_not_ready_keeps_its_machine_in_upgrade(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    agents = await rolled_out(env, kube)
    await env.call("PUT", "/v1/clusters", 200, data=spec(tmp_path / "kubeconfig", "2.0").replace(
        "drain: {", "drain: {nodeReadyTimeoutSeconds: 1, "))
    await env.until("m1 drained", lambda: _stage(env, "m1", "Drained"))
    with kube.locked() as cluster:  # the upgrade restarts the kubelet, which does not come back
        cluster.set_node_ready("m1", False, message="container runtime is down")
    await env.report_all(agents["m1"])
    await env.until("m1 uncordoned", lambda: _stage(env, "m1", "Uncordoned"))
    assert kube.cluster.cordoned() == []
    await env.until("m1 reported not Ready", lambda: _stage(env, "m1", "NodeNotReady"))
    m1 = await machine(env, "m1")
    assert m1["state"] == "Upgrade" and m1["release"] == "1.0"
    expected = ("node m1 is not Ready 1s after the uncordon: Ready=False (KubeletNotReady) "
                "(container runtime is down); still checking")
    assert m1["drain"]["message"] == expected
    await shown_everywhere(env, "m1", f"{expected} (uncordoned ", (
        "check the kubelet on m1 (journalctl -u kubelet) and `kubectl describe node m1`; the "
        "machine leaves Upgrade once its node is Ready"))
    assert (await machine(env, "w1"))["state"] == "Ready", "a worker upgraded beside it"

    with kube.locked() as cluster:
        cluster.set_node_ready("m1", True)
    await env.until("m1 Ready at 2.0", lambda: upgraded(env, agents, "m1"))
    messages = [e["message"] for e in await env.call("GET", "/v1/events?kind=drain", 200)
                if e["hostname"] == "m1"]
    assert messages[-3:] == ["m1: uncordoned node m1", f"m1: {expected}", "m1: node m1 Ready"]


def changed_workers(text: str) -> str:
    """Release 2.0 of the spec as `spec` writes it, with the workers' join item changed and
    the manager's upgrade item left out (nothing for the manager to run), drains off."""
    return (text.replace('{name: join, phase: deploy, action: {type: exec, argv: ["true"]}}',
                         '{name: join, phase: deploy, version: "2", action: {type: exec, '
                         'argv: ["true"]}}')
            .replace(UPGRADE.format(role="manager", release="2.0"), "")
            .replace("drain: {", "drain: {enabled: false, "))


async def test_the_upgrade_plan_lists_the_items_each_machine_runs_and_the_upgrade_runs_them(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    agents = await rolled_out(env, kube)
    new_spec = tmp_path / "v2.yaml"
    new_spec.write_text(changed_workers(spec(tmp_path / "kubeconfig", "2.0")))
    assert (await env.cli("upgrade", "plan", "lab", "-f", str(new_spec))).splitlines() == [
        "upgrade of lab to release 2.0",
        "step 1: w1 (worker, from 1.0) runs deploy/join, upgrade/kubelet-worker",
        "step 2: w2 (worker, from 1.0) runs deploy/join, upgrade/kubelet-worker",
        "nothing to run, recorded at 2.0: m1 (manager, from 1.0)"]
    plan = await env.call("POST", "/v1/clusters/lab/upgrade-plan", 200, data=new_spec.read_text())
    assert plan["steps"][0][0]["items"] == [
        {"name": "join", "phase": "deploy", "version": "2"},
        {"name": "kubelet-worker", "phase": "upgrade", "version": "1"}]
    assert plan["nothing_to_run"] == [{"hostname": "m1", "role": "manager", "from": "1.0"}]

    await env.call("PUT", "/v1/clusters", 200, data=new_spec.read_text())
    await env.until("w1 in Upgrade", lambda: _assigned(env, agents["w1"], "upgrade"))
    assert [i["name"] for i in (await env.assignment(agents["w1"]))["items"]] == [
        "join", "kubelet-worker"]
    assert (await machine(env, "m1"))["release"] == "2.0", "m1 shows as behind"
    for hostname in ("w1", "w2"):
        await env.until(f"{hostname} upgraded", lambda h=hostname: upgraded(env, agents, h))
    assert (await machine(env, "m1"))["state"] == "Ready"
    states = await env.call("GET", "/v1/events?cluster=lab&kind=state", 200)
    assert [e["message"] for e in states if e["data"]["to"] == "Upgrade"] == [
        f"{w} Ready -> Upgrade: worker upgrades (1 of 1 worker slots): runs deploy/join, "
        "upgrade/kubelet-worker" for w in ("w1", "w2")]
    assert "m1 Ready -> Ready: release 2.0 has nothing for it to run: recorded at 2.0" in [
        e["message"] for e in states]
    logs = await env.cli("machines", "logs", "w1")
    assert "w1 deploy/join (in the upgrade) attempt 1 succeeded" in logs
    assert "w1 upgrade/kubelet-worker attempt 1 succeeded" in logs


# -- what every view says of a stuck machine, and what to do ------------------------------------


async def test_a_failing_uncordon_shows_its_error_and_what_to_check(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    agents = await rolled_out(env, kube)
    kubeconfig = tmp_path / "kubeconfig"
    await env.call("PUT", "/v1/clusters", 200, data=spec(kubeconfig, "2.0"))
    await env.until("m1 drained", lambda: _stage(env, "m1", "Drained"))
    kubeconfig.write_text(kube.kubeconfig().replace(kube.url, f"http://127.0.0.1:{free_port()}"))
    await env.report_all(agents["m1"])  # its upgrade items applied: the uncordon is due

    async def failing() -> bool:
        return bool((await machine(env, "m1"))["drain"]["step_error"])

    await env.until("m1's uncordon failing", failing)
    await shown_everywhere(env, "m1", "uncordon failing for ", (
        "check that the coordinator reaches the cluster's API with its kubeconfig and may patch "
        "and delete Nodes (kubectl auth can-i patch nodes); it retries on its own"))
    assert (await machine(env, "m1"))["note"]["failing"]
    kubeconfig.write_text(kube.kubeconfig())
    await env.until("m1 upgraded once the API answers", lambda: upgraded(env, agents, "m1"))
    assert "m1" not in kube.cluster.cordoned()


async def test_an_upgrade_without_kubernetes_access_says_drains_are_skipped_and_ends_ready(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    """A cluster that gives the coordinator no way to its API (no kubeconfig setting, no
    kubeconfigFrom) upgrades in place: the plan, the apply and the status each say so once,
    and no view reports a cordon, a blocked drain or an uncordon that never happened."""
    def unreachable(release: str) -> str:
        return spec(None, release).replace(", kubeconfigFrom: /etc/kubernetes/admin.conf", "")

    await env.call("PUT", "/v1/clusters", 200, data=unreachable("1.0"))
    agents = {}
    for hostname, role in (("m1", "manager"), ("w1", "worker")):
        agent = agents[hostname] = await env.register(hostname)
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
        await env.until(f"{hostname} Ready", lambda a=agent, h=hostname: _ready(env, a, h))
    new_spec = tmp_path / "v2.yaml"
    new_spec.write_text(unreachable("2.0"))
    plan = await env.cli("upgrade", "plan", "lab", "-f", str(new_spec))
    assert plan.splitlines()[-1] == f"warning: {NO_ACCESS_DRAINS_SKIPPED}"
    assert flat(plan).count("drains skipped") == 1
    new_spec.write_text(unreachable("2.0").replace("drain: {", "drain: {enabled: false, "))
    assert "warning" not in await env.cli("upgrade", "plan", "lab", "-f", str(new_spec))

    applied = await env.call("PUT", "/v1/clusters", 200, data=unreachable("2.0"))
    assert applied["warnings"] == [NO_ACCESS_DRAINS_SKIPPED]
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    ready = status["stages"][-1]["message"]
    assert ready.endswith("; no Kubernetes access: drains skipped"), ready
    for hostname in ("m1", "w1"):
        await env.until(f"{hostname} upgraded", lambda h=hostname: upgraded(env, agents, h))
    for hostname in ("m1", "w1"):
        found = await machine(env, hostname)
        assert found["drain"] is None and not found["note"]["text"], found
    events = await env.call("GET", "/v1/events?cluster=lab", 200)
    assert [e["message"] for e in events if e["kind"] == "drain"] == []
    assert not any("cordon" in e["message"] for e in events)


async def test_no_upgrade_step_starts_outside_a_maintenance_window(tmp_path: Path) -> None:
    """settings.upgrade.windows, with the coordinator's clock moved by the test: an upgrade
    applied on a Friday afternoon waits, saying for which window, and starts once Saturday's
    window opens (Berlin time)."""
    window = ('  upgrade: {workerBatchSize: 1, windows: [{days: [sat], start: "22:00", '
              'duration: 4h, timeZone: Europe/Berlin}]}\n')

    def windowed(release: str) -> str:
        text = spec(None, release).replace(", kubeconfigFrom: /etc/kubernetes/admin.conf", "")
        return text.replace("  upgrade: {workerBatchSize: 1}\n", window, 1)

    friday = datetime(2026, 11, 27, 15, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    async with in_process_coordinator(tmp_path, None, clock=ManualClock(friday)) as env:
        await windows_hold_the_upgrade(env, windowed)


async def windows_hold_the_upgrade(env: InProcessCoordinator,
                                   windowed: Callable[[str], str]) -> None:
    bad = windowed("1.0").replace('timeZone: Europe/Berlin', 'timeZone: Mars/Olympus')
    refused = await env.call("PUT", "/v1/clusters", 422, data=bad)
    assert [(p["path"], p["line"]) for p in refused["problems"]] == [
        ("settings.upgrade.windows[0].timeZone", 4)], refused
    await env.call("PUT", "/v1/clusters", 200, data=windowed("1.0"))
    agent = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.until("m1 Ready", lambda: _ready(env, agent, "m1"))

    await env.call("PUT", "/v1/clusters", 200, data=windowed("2.0"))
    for _ in range(3):
        await env.coordinator.reconciler.reconcile_once()
    assert (await machine(env, "m1"))["state"] == "Ready", "an upgrade started outside a window"
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    ready = status["stages"][-1]
    assert (ready["state"], ready["message"]) == ("waiting", (
        "1 of 1 Ready; outside the maintenance windows: waiting for the window at "
        "2026-11-28T21:00:00Z (settings.upgrade.windows): m1 to upgrade to release 2.0; "
        "no Kubernetes access: drains skipped"))
    assert status["rollout"]["held"] == ("stalled: outside the maintenance windows "
                                         "(settings.upgrade.windows)")
    assert "waiting for the window at 2026-11-28T21:00:00Z" in flat(await env.cli("status", "lab"))
    assert ("note: not now: outside the maintenance windows: waiting for the window at "
            "2026-11-28T21:00:00Z") in await env.cli("upgrade", "plan", "lab")

    env.clock.now = datetime(2026, 11, 28, 22, 1, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    await env.until("m1 upgrading in the window", lambda: _assigned(env, agent, "upgrade"))
    assert (await machine(env, "m1"))["state"] == "Upgrade"


async def test_the_failure_budget_stops_the_upgrade_naming_the_machine_that_failed(
        env: InProcessCoordinator) -> None:
    """settings.upgrade.maxFailedUpgrades 0: once w1 gives up on its upgrade item, no other
    worker starts upgrading, and the status names w1 until it is retried and upgraded."""
    def budgeted_spec(release: str) -> str:
        text = spec(None, release).replace(", kubeconfigFrom: /etc/kubernetes/admin.conf", "")
        return text.replace("  upgrade: {workerBatchSize: 1}\n",
                            "  upgrade: {workerBatchSize: 1, maxFailedUpgrades: 0}\n", 1)

    await env.call("PUT", "/v1/clusters", 200, data=budgeted_spec("1.0"))
    agents = {}
    for hostname, role in (("m1", "manager"), ("w1", "worker"), ("w2", "worker")):
        agent = agents[hostname] = await env.register(hostname)
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
        await env.until(f"{hostname} Ready", lambda a=agent, h=hostname: _ready(env, a, h))
    await env.call("PUT", "/v1/clusters", 200, data=budgeted_spec("2.0"))
    await env.until("m1 upgraded", lambda: upgraded(env, agents, "m1"))
    await env.until("w1 upgrading", lambda: _assigned(env, agents["w1"], "upgrade"))
    await env.report_item(agents["w1"], "kubelet-worker", "failed", attempt=3,
                          error="exit 1", exit_code=1, gave_up=True)
    for _ in range(3):
        await env.coordinator.reconciler.reconcile_once()
    assert (await machine(env, "w2"))["state"] == "Ready", "w2 started past the budget"
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert ("upgrades stopped: the upgrade of 1 machine failed, more than "
            "settings.upgrade.maxFailedUpgrades (0): w1") in status["stages"][-1]["message"]
    await env.call("POST", "/v1/machines/w1/retry", 200)
    await env.until("w1 upgraded", lambda: upgraded(env, agents, "w1"))
    await env.until("w2 upgraded", lambda: upgraded(env, agents, "w2"))


async def _ready(env: InProcessCoordinator, agent: dict[str, str], hostname: str) -> bool:
    await env.report_all(agent)
    return (await machine(env, hostname))["state"] == "Ready"
