"""Approval through the API as the operator and the agents meet it: a machine whose prechecks
pass only after a fix is auto-approved then, and a role's CPU and memory minimums are judged
for the role it is approved as, from the values its node measured."""

from __future__ import annotations

from coordinator.cli.formatting import machine_full
from nodeagent.prechecks import CHECKS
from nodeagent.prechecks.kernel import evaluate_ip_forward
from nodeagent.prechecks.runner import grade
from tests.support.builders import API_CLUSTER, precheck_report
from tests.support.harness import InProcessCoordinator

CHECKS_BY_NAME = {c.name: c for c in CHECKS}
SMALL = {"cpus": 1, "memory": 1024 << 20}  # enough for a worker, not for a manager


async def auto_approving(env: InProcessCoordinator, role: str) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER.replace(
        "settings: {", f"settings: {{autoApprove: true, autoApproveRole: {role}, "))


async def events(env: InProcessCoordinator, hostname: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["message"])
            for e in await env.call("GET", f"/v1/events?machine={hostname}", 200)]


async def test_a_machine_whose_prechecks_pass_later_is_auto_approved_then(
        env: InProcessCoordinator) -> None:
    await auto_approving(env, "worker")
    w1 = await env.register("w1", failing=True)
    assert not (await env.machine("w1"))["approved"]

    # The operator fixes the node; its agent checks again and sends the new report.
    await env.precheck(w1, precheck_report("w1"))
    found = await env.machine("w1")
    assert (found["approved"], found["role"], found["precheck_failures"]) == (True, "worker", [])
    assert (await events(env, "w1"))[-2:] == [("precheck", "w1 prechecks now pass"),
                                             ("approved", "w1 auto-approved as worker")]
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("w1"))["state"] == "Prepare"


async def test_approving_as_a_manager_judges_a_managers_minimums_from_a_worker_report(
        env: InProcessCoordinator) -> None:
    await env.register("m1", **SMALL)  # its agent's config says worker: worker minimums passed
    refused = await env.call("POST", "/v1/machines/m1/approve", 409, json={"role": "manager"})
    assert refused["error"].startswith(
        "m1 cannot run as a manager: hard prechecks failed: cpu: 1 CPU(s); a manager needs at "
        "least 2; memory: 1024 MiB of memory; a manager needs at least 1700 MiB.")
    assert "approve it as a worker instead" in refused["error"]
    assert not (await env.machine("m1"))["approved"]

    # Approved without a role, it cannot be given the manager's role either.
    await env.call("POST", "/v1/machines/m1/approve", 200)
    refused = await env.call("PUT", "/v1/machines/m1/role", 409, json={"role": "manager"})
    assert refused["error"].startswith("m1 cannot run as a manager")
    assert (await env.call("PUT", "/v1/machines/m1/role", 200, json={"role": "worker"}))["role"] \
        == "worker"


async def test_auto_approval_as_a_manager_leaves_a_small_host_pending_and_says_why(
        env: InProcessCoordinator) -> None:
    await auto_approving(env, "manager")
    await env.register("m1", **SMALL)
    await env.register("m2")
    assert (await env.machine("m2"))["approved"]
    small = await env.machine("m1")
    assert not small["approved"]
    assert small["precheck_failures"] == []  # as its node checked it, for a worker
    (registered,) = await events(env, "m1")
    assert registered[1].endswith("hard prechecks failed: cpu: 1 CPU(s); a manager needs at "
                                  "least 2; memory: 1024 MiB of memory; a manager needs at "
                                  "least 1700 MiB")


async def test_a_report_without_measured_values_is_answered_not_a_server_error(
        env: InProcessCoordinator) -> None:
    report = precheck_report("m1")
    for check in report["checks"]:
        check["data"] = {}
    m1 = await env.register("m1", failing=True)
    await env.precheck(m1, report)
    refused = await env.call("POST", "/v1/machines/m1/approve", 409, json={"role": "manager"})
    assert "cpu: not measured (its report, checked for a worker, carries no 'cpus' value)" \
        in refused["error"]
    assert "set `role: manager` in its agent's config" in refused["error"]
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "worker"})


CLONED_UUID = "4c4c4544-0042-3510-8052-b4c04f4e5032"


async def test_a_cloned_vm_is_refused_approval_naming_the_machine_it_was_cloned_from(
        env: InProcessCoordinator) -> None:
    """kubeadm asks that product_uuid and every MAC be unique: the coordinator checks it
    across the fleet, and refuses the second machine, naming the first and what to do."""
    await auto_approving(env, "worker")
    w1 = await env.register("w1", identity=(CLONED_UUID, ["52:54:00:12:34:56"]))
    await env.register("w2", identity=(CLONED_UUID.upper(), ["52:54:00:65:43:21"]))
    await env.register("w3", identity=("0e5c8f3a-1111-2222-3333-444455556666",
                                       ["52:54:00:12:34:56"]))
    assert (await env.machine("w1"))["approved"]
    w2 = await env.machine("w2")
    assert not w2["approved"]
    assert w2["precheck_failures"] == [
        f"machine-identity: product_uuid {CLONED_UUID} is also machine w1 (id {w1['machine_id']}, "
        "cluster lab)'s: a cloned VM: give this one a new system UUID (regenerate it in the "
        "hypervisor, e.g. a new VM from the template rather than a copy) or delete w1 if it is "
        "this host registered before"]
    assert w2["note"]["text"].startswith("prechecks failed: machine-identity: product_uuid")
    refused = await env.call("POST", "/v1/machines/w3/approve", 409, json={"role": "worker"})
    assert "machine-identity: mac 52:54:00:12:34:56 is also machine w1" in refused["error"]

    # w1 was the template, not a node: once it is deleted, w2 may be approved.
    await env.call("DELETE", "/v1/machines/w1?skipReset=true", 200)
    assert (await env.call("POST", "/v1/machines/w2/approve", 200))["approved"]


async def test_a_prerequisite_off_at_registration_is_shown_as_to_be_set_by_prepare(
        env: InProcessCoordinator) -> None:
    """A stock host (forwarding off) registers with nothing failing: its view and `machines
    get` say what Prepare will set, and approval is not refused for it."""
    report = precheck_report("w1")
    forwarding = grade(CHECKS_BY_NAME["ip-forward"], evaluate_ip_forward("0"), 0.0, frozenset())
    report["checks"].append(forwarding.model_dump(mode="json"))
    report["summary"]["warned"] += 1
    await env.register("w1")
    agent = env.agents["w1"]
    await env.precheck(agent, report)
    w1 = await env.machine("w1")
    assert w1["precheck_failures"] == []
    assert w1["precheck_to_be_prepared"] == [
        "ip-forward: IPv4 forwarding is off (/proc/sys/net/ipv4/ip_forward = 0)"]
    assert ("prechecks  passed; to be set by Prepare: ip-forward: IPv4 forwarding is off "
            "(/proc/sys/net/ipv4/ip_forward = 0)") in machine_full(w1)  # `machines get`
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
