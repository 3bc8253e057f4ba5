"""Deleting machines through the API and CLI, against a real SQLite store and the test
Kubernetes API server: a deleted machine's Node (found by its mark, not its hostname) is
cordoned and drained through the Eviction API honouring budgets, its reset items run, its Node
is deleted, then its record goes; a blocked drain shows and is answered as an upgrade's is;
managers leave one at a time and only while a majority of them is left, unless forced."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL
from tests.integration.api.operator import machine
from tests.support.driver import Registered
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server

SPEC = """\
name: lab
release: "1.0"
settings:
  drain: {{timeoutSeconds: 3, evictionRetrySeconds: 0.05}}
  kubernetes: {{kubeconfig: {kubeconfig}}}
machineTypes:
  manager:
    - {{name: control-plane, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
    - {{name: peers, phase: reconfigure, action: {{type: exec, argv: ["true", "${{managers}}"]}}}}
    - {{name: kubeadm-reset, phase: reset, action: {{type: exec, argv: [kubeadm, reset, -f]}}}}
  worker:
    - {{name: join, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
    - {{name: kubeadm-reset, phase: reset, action: {{type: exec, argv: [kubeadm, reset, -f]}}}}
"""


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    with kube_api_server(Cluster(ready_delay=0.3)) as server:
        yield server


@pytest.fixture
async def env(tmp_path: Path, kube: KubeApiServer) -> AsyncIterator[InProcessCoordinator]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    # The real clock: drains time out for real.
    async with in_process_coordinator(tmp_path, SPEC.format(kubeconfig=kubeconfig),
                                      clock=time.time) as running:
        yield running


Agents = dict[str, Registered]


async def rolled_out(env: InProcessCoordinator, kube: KubeApiServer, managers: int,
                     workers: int, unregistered: tuple[str, ...] = ()) -> Agents:
    """Managers m1.. and workers w1.. Ready, each with a Node its kubelet registered as
    node-HOSTNAME, marked with its machine id (not named after its hostname); the unregistered
    ones have none, and so wait in Deploy for it."""
    agents = {}
    for role, count in (("manager", managers), ("worker", workers)):
        for index in range(1, count + 1):
            hostname = f"{role[0]}{index}"
            agents[hostname] = await env.register(hostname)
            await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
            if hostname not in unregistered:
                with kube.locked() as cluster:
                    cluster.add_node(f"node-{hostname}",
                                     {MACHINE_ID_LABEL: agents[hostname]["machine_id"]})

    async def agents_apply() -> bool:
        for agent in agents.values():
            await env.report_all(agent)
        status = await env.call("GET", "/v1/clusters/lab/status", 200)
        expected = {"Ready": len(agents) - len(unregistered), "Deploy": len(unregistered)}
        return bool(status["counts"] == {k: n for k, n in expected.items() if n})

    await env.until("the rollout", agents_apply)
    return agents


async def stage(env: InProcessCoordinator, hostname: str, wanted: str) -> bool:
    drain = (await machine(env, hostname))["drain"]
    return bool(drain) and drain["stage"] == wanted


async def gone(env: InProcessCoordinator, hostname: str) -> bool:
    response = await env.client.get(f"/v1/machines/{hostname}", headers=env.admin)
    return response.status == 404


async def reset(env: InProcessCoordinator, kube: KubeApiServer, agent: Registered,
                node: str) -> None:
    """The machine's agent is handed its reset items and applies them, its Node still there."""
    assignment = await env.assignment(agent)
    assert assignment["phase"] == "reset"
    assert [i["name"] for i in assignment["items"]] == ["kubeadm-reset"]
    assert node in kube.cluster.nodes, "the Node was deleted before the reset items ran"
    await env.report_all(agent)


async def said_of(env: InProcessCoordinator, hostname: str, kind: str = "") -> list[str]:
    """The messages of the events about hostname (by name: its record may be gone)."""
    events = await env.call("GET", "/v1/events?cluster=lab" + (f"&kind={kind}" if kind else ""),
                            200)
    return [e["message"] for e in events if e["hostname"] == hostname]


async def test_deleting_a_worker_drains_its_node_resets_it_then_deletes_the_node(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agents = await rolled_out(env, kube, managers=1, workers=2)
    with kube.locked() as cluster:  # two pods on w1; the budget lets one go at a time
        cluster.add_replicaset("default", "web", 3, {"app": "web"},
                               nodes=["node-w1", "node-w2", "node-w1"])
        cluster.add_pdb("default", "web", {"app": "web"}, min_available=2)
        cluster.add_node("w1")  # named like the machine, but another's: never touched

    assert (await env.call("DELETE", "/v1/machines/w1", 202))["status"] == "resetting"
    w1 = await machine(env, "w1")
    assert (w1["state"], w1["drain"]["stage"]) == ("Deleting", "Draining")
    assert (await env.assignment(agents["w1"]))["items"] == [], "reset items before the drain"

    await env.until("w1 drained", lambda: stage(env, "w1", "Drained"))
    assert kube.cluster.cordoned() == ["node-w1"] and kube.cluster.pods_on("node-w1") == []
    assert kube.cluster.refusals > 0, "the budget never refused an eviction: nothing waited"
    assert kube.cluster.min_healthy["default/web"] == 2, "the budget was violated"
    assert kube.cluster.deleted_nodes == []

    await reset(env, kube, agents["w1"], "node-w1")
    await env.until("w1 removed", lambda: gone(env, "w1"))
    assert kube.cluster.deleted_nodes == ["node-w1"]
    assert sorted(kube.cluster.nodes) == ["node-m1", "node-w2", "w1"]
    assert "w1" not in kube.cluster.cordoned()
    messages = await said_of(env, "w1")
    assert "w1 Ready -> Deleting: drain, reset items, Node deletion" in messages
    assert "w1: node node-w1 deleted" in messages
    assert "w1 Deleting -> removed: reset items applied, node node-w1 deleted: machine " \
        "removed" in messages, messages


async def test_a_blocked_removal_drain_shows_and_the_operator_answers_it(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agents = await rolled_out(env, kube, managers=1, workers=1)
    with kube.locked() as cluster:  # a single replica its budget never lets go
        cluster.add_replicaset("default", "db", 1, {"app": "db"}, nodes=["node-w1"])
        cluster.add_pdb("default", "db", {"app": "db"}, min_available=1)
    [pod] = kube.cluster.pods_on("node-w1")

    await env.cli("delete", "w1")
    await env.until("w1's drain blocked", lambda: stage(env, "w1", "Blocked"))
    w1 = await machine(env, "w1")
    assert w1["state"] == "Deleting"
    assert (w1["drain"]["blocking_pods"], w1["drain"]["blocking_budgets"]) == (
        [pod], ["default/db"])
    table = await env.cli("machines")
    assert "drain Blocked (attempt 1, cordoned for " in table and "retry|skip|force w1" in table
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    [shown] = [m["drain"] for m in status["machines"] if m["hostname"] == "w1"]
    assert shown["blocking_budgets"] == ["default/db"] and "budget default/db" in shown["message"]
    assert (await env.assignment(agents["w1"]))["items"] == []

    await env.cli("upgrade", "force", "w1")
    await env.until("w1 drained by force", lambda: stage(env, "w1", "Drained"))
    assert pod not in kube.cluster.pods_on("node-w1")
    await reset(env, kube, agents["w1"], "node-w1")
    await env.until("w1 removed", lambda: gone(env, "w1"))
    assert kube.cluster.deleted_nodes == ["node-w1"]


async def test_managers_leave_one_at_a_time_and_never_below_a_majority(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agents = await rolled_out(env, kube, managers=3, workers=1)
    addresses = {h: (await machine(env, h))["ip"] or h for h in ("m1", "m2", "m3")}

    await env.call("DELETE", "/v1/machines/m3", 202)  # 3 -> 2: a majority is left
    refused = await env.call("DELETE", "/v1/machines/m2", 409)
    assert "managers leave one at a time" in refused["error"] and "m3 is Deleting" in refused["error"]

    # m3 leaves the manager list at once: the others reconfigure without it, m3 resets as a
    # member (its Node and etcd member still there) and goes.
    await env.until("m3 drained", lambda: stage(env, "m3", "Drained"))
    await reset(env, kube, agents["m3"], "node-m3")
    await env.until("m3 removed", lambda: gone(env, "m3"))
    assert kube.cluster.deleted_nodes == ["node-m3"]

    seen: set[str] = set()  # the managers whose reconfigure items saw m1 and m2 alone

    async def reconfigured() -> bool:
        for hostname in ("m1", "m2"):
            current = await env.assignment(agents[hostname])
            if current["phase"] == "reconfigure":
                assert current["values"]["managers"] == f"{addresses['m1']},{addresses['m2']}"
                seen.add(hostname)
            await env.report_all(agents[hostname])
        status = await env.call("GET", "/v1/clusters/lab/status", 200)
        return bool(status["counts"] == {"Ready": 3})

    await env.until("m1 and m2 reconfigured for two managers", reconfigured)
    assert seen == {"m1", "m2"}

    # 2 -> 1 would leave no majority: refused, naming the numbers, through the CLI too
    refused = await env.call("DELETE", "/v1/machines/m2", 409)
    assert refused["error"].startswith("deleting m2 would leave 1 of the 2 deployed managers, "
                                       "fewer than a majority (2)")
    said = await env.cli("delete", "m2", exit_code=1)
    assert "error: deleting m2 would leave 1 of the 2" in said and "--force" in said
    assert (await machine(env, "m2"))["state"] == "Ready"

    assert "m2: resetting" in await env.cli("delete", "m2", "--force")
    [forced] = [m for m in await said_of(env, "m2", "state") if "-> Deleting" in m]
    assert "(forced, though deleting m2 would leave 1 of the 2" in forced


async def test_skip_reset_removes_at_once_and_a_bad_flag_is_refused(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    await rolled_out(env, kube, managers=1, workers=1)
    bad = await env.call("DELETE", "/v1/machines/w1?skipReset=maybe", 422)
    assert "skipReset" in str(bad)
    await env.call("DELETE", "/v1/machines/m1", 409)  # the last manager
    assert (await env.call("DELETE", "/v1/machines/w1?skipReset=true", 200))["status"] == "removed"
    assert kube.cluster.deleted_nodes == [] and kube.cluster.cordoned() == []


async def test_a_machine_whose_node_never_registered_is_reset_and_removed_saying_so(
        env: InProcessCoordinator, kube: KubeApiServer) -> None:
    agents = await rolled_out(env, kube, managers=1, workers=1, unregistered=("w1",))
    with kube.locked() as cluster:
        cluster.add_node("w1")  # named like the machine, but not marked as its Node
    await env.call("DELETE", "/v1/machines/w1", 202)
    await env.until("w1's drain skipped", lambda: stage(env, "w1", "Skipped"))
    note = "no Node carries the mark of w1 (never registered): no drain, no Node to delete"
    assert (await machine(env, "w1"))["drain"]["message"] == note
    await env.report_all(agents["w1"])
    await env.until("w1 removed", lambda: gone(env, "w1"))
    assert kube.cluster.deleted_nodes == [] and kube.cluster.cordoned() == []
    assert f"w1: {note}" in await said_of(env, "w1", "drain")
