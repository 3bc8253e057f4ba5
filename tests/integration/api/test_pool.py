"""The machine pool through the API as an operator and agents meet it: machines registered with
a pool join token, approved into the pool; a cluster that claims them by selector, says what it
cannot fill until a machine that fits appears, waits for its provision step, and gives machines
back to the pool on a scale-down, where they are available again once prechecked anew."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.domain.model import NodeStatus
from tests.support import builders
from tests.support.builders import API_CLUSTER, precheck_report
from tests.support.driver import Call, Registered
from tests.support.harness import InProcessCoordinator

CLAIMING = API_CLUSTER.replace("settings: {", "settings: {provision: {held: true}, ") + """\
pool:
  managers: {count: 1}
  workers: {count: WORKERS, selector: {labels: {disk: ssd}}}
"""


async def into_pool(env: InProcessCoordinator, token: str, hostname: str) -> Registered:
    agent: Registered = await env.send(Call(
        "POST", "/v1/agent/register", 201, join_token=token,
        body=builders.registration(hostname, token)))
    env.agents[hostname] = agent
    return agent


async def pool(env: InProcessCoordinator) -> dict[str, str]:
    page = await env.call("GET", "/v1/machines?pool=true", 200)
    return {m["hostname"]: m["state"] for m in page["machines"]}


async def status(env: InProcessCoordinator) -> dict[str, Any]:
    return await env.call("GET", "/v1/clusters/lab/status", 200)


async def test_a_cluster_claims_pool_machines_by_selector_and_gives_them_back(
        env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/pool/join-tokens", 201, json={"autoApprove": True})
    assert (created["cluster"], created["pool"], created["auto_approve"]) == (None, True, True)
    agents = {h: await into_pool(env, created["token"], h) for h in ("p1", "p2", "p3", "p4")}
    assert await pool(env) == dict.fromkeys(agents, "Uninitialized")
    for hostname in ("p2", "p3"):
        await env.call("PATCH", f"/v1/machines/{hostname}/labels", 200,
                       json={"set": {"disk": "ssd"}})

    # Three workers with an SSD wanted; two in the pool have one: the status says so.
    await env.call("PUT", "/v1/clusters", 200, data=CLAIMING.replace("WORKERS", "3"))
    await env.coordinator.reconciler.reconcile_once()
    assert await pool(env) == {"p4": "Uninitialized"}
    claimed = {m["hostname"]: (m["claim"], m["state"]) for m in (await status(env))["machines"]}
    assert claimed == {"p1": ("manager-0", "Pending"), "p2": ("worker-0", "Pending"),
                       "p3": ("worker-1", "Pending")}
    shown = (await status(env))["pool"]
    assert shown["notes"] == ["needs 3 workers with label disk=ssd; has 2, and the pool has no "
                              "more that fit (1 lack label disk=ssd)"]
    assert [(r["role"], r["wanted"], r["held"]) for r in shown["roles"]] == [
        ("manager", 1, 1), ("worker", 3, 2)]

    # A machine that fits registers: it is claimed in the next free place.
    p5 = await into_pool(env, created["token"], "p5")
    await env.call("PATCH", "/v1/machines/p5/labels", 200, json={"set": {"disk": "ssd"}})
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("p5"))["claim"] == "worker-2"
    assert (await status(env))["pool"]["notes"] == []

    # Held for the provision step: approved and claimed, they wait in Pending until then.
    assert {m["state"] for m in (await status(env))["machines"]} == {"Pending"}
    assert (await status(env))["held"] is True
    answer = await env.call("POST", "/v1/clusters/lab/provision", 200)
    assert (answer["provisioned"], answer["held"]) == (True, False)
    await env.coordinator.reconciler.reconcile_once()
    assert {m["state"] for m in (await status(env))["machines"]} == {"Prepare"}
    assert "cluster lab is not held (settings.provision.held is false): nothing to do" in \
        await env.cli("cluster", "provision", "lab")

    # Three workers down to one: the highest places go back (no reset items: at once), and
    # come back to the pool Pending, a new incarnation, until their agents' prechecks pass.
    await env.call("PUT", "/v1/clusters", 200, data=CLAIMING.replace("WORKERS", "1"))
    await env.coordinator.reconciler.reconcile_once()
    await env.coordinator.reconciler.reconcile_once()
    assert await pool(env) == {"p3": "Pending", "p4": "Uninitialized", "p5": "Pending"}
    back = await env.assignment(p5)
    assert (back["state"], back["phase"], back["items"], back["incarnation"]) == (
        "Pending", None, [], 1)
    assert (await env.machine("p5"))["claim"] is None
    await env.precheck(p5, precheck_report("p5"))
    assert (await pool(env))["p5"] == "Uninitialized"
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?machine=p5", 200)]
    assert kinds[-5:] == ["state", "released", "returned", "precheck", "approved"]


async def test_pool_machines_refuse_what_only_a_cluster_gives(env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/pool/join-tokens", 201, json={})
    await into_pool(env, created["token"], "p1")
    assert await pool(env) == {"p1": "Pending"}  # the token does not approve: the operator does
    refused = await env.call("POST", "/v1/machines/p1/approve", 409, json={"role": "worker"})
    assert "its role come with the cluster that claims it" in refused["error"]
    assert (await env.call("PUT", "/v1/machines/p1/role", 409, json={"role": "worker"}))[
        "error"].startswith("p1 is in the pool: the cluster that claims it gives its role")
    await env.call("POST", "/v1/machines/p1/approve", 200, json={"labels": {"rack": "a"}})
    assert await pool(env) == {"p1": "Uninitialized"}
    await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER)
    bad = await env.call("POST", "/v1/clusters/lab/join-tokens", 422, json={"autoApprove": True})
    assert "only a pool join token approves" in str(bad)
    both = await env.call("GET", "/v1/machines?pool=true&cluster=lab", 422)
    assert "give cluster or pool=true, not both" in str(both)
    assert [t["pool"] for t in await env.call("GET", "/v1/pool/join-tokens", 200)] == [True]
    listed = await env.cli("join-token", "list", "--pool")
    assert "(pool)" in listed and "lab" not in listed
    assert "give a cluster's name or --pool" in await env.cli("join-token", "create",
                                                              exit_code=2)
    assert "--auto-approve is for pool tokens" in await env.cli(
        "join-token", "create", "lab", "--auto-approve", exit_code=2)
    assert (await env.call("DELETE", "/v1/machines/p1", 200))["status"] == "removed"
    assert await pool(env) == {}


HEALING = API_CLUSTER.replace(
    "settings: {", "settings: {health: {unhealthyAfterSeconds: 60, maxUnhealthy: 1}, ") + """\
pool:
  managers: {count: 1}
  workers: {count: 2}
"""


async def deployed(env: InProcessCoordinator, hostnames: tuple[str, ...]) -> None:
    """The claimed machines' agents run every item they are given, until each is Ready."""
    async def ready() -> bool:
        for hostname in hostnames:
            if (await env.machine(hostname))["state"] != "Ready":
                await env.report_all(env.agents[hostname])
        return all([(await env.machine(h))["state"] == "Ready" for h in hostnames])
    await env.until("the claimed machines Ready", ready)


async def beat(env: InProcessCoordinator, *hostnames: str) -> None:
    """These agents' heartbeats, written as the heartbeat writer writes them."""
    for hostname in hostnames:
        await env.heartbeat(env.agents[hostname])
    await env.coordinator.heartbeats.flush()


async def passes(env: InProcessCoordinator) -> None:
    """Two reconcile passes, the first one looking at the health policy as its 10 s recheck
    would."""
    env.coordinator.reconciler._claims_checked.clear()
    await env.coordinator.reconciler.reconcile_once()
    await env.coordinator.reconciler.reconcile_once()


async def test_a_silent_claimed_machine_is_replaced_from_the_pool_within_max_unhealthy(
        env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/pool/join-tokens", 201, json={"autoApprove": True})
    for hostname in ("p1", "p2", "p3", "p4", "p5"):
        await into_pool(env, created["token"], hostname)
    await env.call("PUT", "/v1/clusters", 200, data=HEALING)
    await env.coordinator.reconciler.reconcile_once()
    await deployed(env, ("p1", "p2", "p3"))
    assert (await env.machine("p2"))["claim"] == "worker-0"

    # p2's agent goes silent; the others answer. The dry run says when it is due.
    env.clock.now += 40
    await beat(env, "p1", "p3", "p4", "p5")
    await passes(env)
    plan = await env.cli("machines", "remediate", "--dry-run", "--cluster", "lab")
    assert "p2 (worker-0): its agent has not answered since" in plan
    assert "would now" not in plan
    assert "--dry-run shows what it would do" in await env.cli("machines", "remediate",
                                                                exit_code=2)

    # Past its heartbeat timeout (30 s) and 60 s more: replaced. Its reset cannot run (its
    # agent is silent): it is removed, not returned to the pool, and p4 takes a new place.
    env.clock.now += 60
    await beat(env, "p1", "p3", "p4", "p5")
    await passes(env)
    await passes(env)
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?machine=p2", 200)]
    assert "remediated" in kinds
    assert (await env.call("GET", "/v1/machines?q=p2", 200))["total"] == 0
    assert (await env.machine("p4"))["claim"] == "worker-2"
    assert await pool(env) == {"p5": "Uninitialized"}

    # Two unhealthy at once with maxUnhealthy 1: nothing is remediated, and the status says why.
    await deployed(env, ("p4",))
    env.clock.now += 200
    await beat(env, "p1", "p5")
    await passes(env)
    assert {m["hostname"]: m["state"] for m in (await status(env))["machines"]} == {
        "p1": "Ready", "p3": "Ready", "p4": "Ready"}
    assert (await status(env))["pool"]["notes"][0].startswith(
        "2 machines unhealthy (p3, p4), more than health.maxUnhealthy (1): none is remediated")


REMEDYING = API_CLUSTER.replace(
    "settings: {", "settings: {health: {unhealthyAfterSeconds: 60}, "
    "kubernetes: {kubeconfig: /nonexistent/kubeconfig}, ") + """\
    - {name: restart-kubelet, phase: remedy, action: {type: exec, argv: [systemctl, restart,
       kubelet]}}
"""


async def test_an_unhealthy_machine_runs_its_remedy_items_and_one_not_claimed_is_not_replaced(
        env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=REMEDYING)
    manager, worker = await env.register("m1"), await env.register("w1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    await env.coordinator.reconciler.reconcile_once()
    for _ in range(6):  # their items reported, their Nodes Ready (as the Node watch finds them)
        await env.report_all(manager)
        await env.report_all(worker)
        for machine in await env.store.get_machines([manager["machine_id"],
                                                     worker["machine_id"]]):
            if machine.state.value in ("Deploy", "Ready") and machine.node is None:
                await env.store.commit([replace(machine, node=NodeStatus(
                    waiting_since=0.0, name=machine.hostname, ready=True, condition="True"))])
                env.coordinator.writes.mark([machine.id])
        await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("w1"))["state"] == "Ready"

    # w1's Node goes NotReady; its agent answers: past 60 s it runs its remedy items first.
    (w1,) = await env.store.get_machines([worker["machine_id"]])
    assert w1.node is not None
    await env.store.commit([replace(w1, node=replace(
        w1.node, ready=False, condition="False", reason="KubeletNotReady",
        unready_since=env.clock.now))])
    env.coordinator.writes.mark([w1.id])
    env.clock.now += 61
    await beat(env, "m1", "w1")
    await passes(env)
    handed = await env.assignment(worker)
    assert (handed["phase"], [i["name"] for i in handed["items"]]) == (
        "remedy", ["restart-kubelet"])
    assert handed["items"][0]["version"].endswith("+remedy.1")
    await env.report_item(worker, "restart-kubelet", "succeeded")
    assert (await env.assignment(worker))["phase"] is None  # done: nothing more to run
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?machine=w1", 200)]
    assert "remedy" in kinds

    # Still NotReady 60 s after: it is not claimed from the pool, so nothing replaces it; the
    # status says so, and it stays.
    env.clock.now += 61
    await beat(env, "m1", "w1")
    await passes(env)
    assert (await env.machine("w1"))["state"] == "Ready"
    assert (await status(env))["pool"]["notes"] == [
        "w1 is unhealthy (its Node w1 is NotReady (KubeletNotReady)) but was not claimed from "
        "the pool: nothing replaces it; fix or delete it"]
