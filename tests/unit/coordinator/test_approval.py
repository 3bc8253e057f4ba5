"""Approval as a role, and auto-approval, without a store: the role's CPU and memory minimums
are judged for the role a machine is approved as, from what its node measured, with the
node's own definition of them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.fitness import fitness
from coordinator.domain.machines.approval import approval, auto_approved, prechecked, refusal, role_set
from coordinator.domain.machines.registration import Credential, registered
from coordinator.domain.model import ClusterSettings, Machine, MachineState
from nodeagent.prechecks.resources import evaluate_cpu, evaluate_memory
from nodeagent.wire.contract import ROLES, Role
from nodeagent.wire.minimums import MiB
from nodeagent.wire.protocol import PrecheckReport, RegisterRequest, Status
from tests.support.builders import FOREIGN_OS, change_or_refusal, decided, machine, precheck_report

SMALL = {"cpus": 1, "memory": 1024 * MiB}  # a worker's minimums, a manager's not
AUTO_MANAGER = ClusterSettings(autoApprove=True, autoApproveRole="manager")
AUTO_WORKER = ClusterSettings(autoApprove=True, autoApproveRole="worker")


def pending(checked_as: Role = "worker", **report: Any) -> Machine:
    """m1, Pending without a role, its last precheck report checked for checked_as."""
    return replace(machine("m1", None, approved=False),
                   precheck=precheck_report("m1", checked_as, **report))


def test_a_worker_report_is_judged_against_a_managers_minimums_with_the_measured_values() -> None:
    small = pending(**SMALL)
    assert small.precheck_failures() == []  # as the node checked it: a worker
    assert small.precheck_failures("manager") == [
        "cpu: 1 CPU(s); a manager needs at least 2",
        "memory: 1024 MiB of memory; a manager needs at least 1700 MiB"]


def test_a_manager_report_short_of_a_managers_minimums_still_fits_a_worker() -> None:
    small = pending("manager", **SMALL)
    assert small.precheck_failures() == ["cpu: 1 CPU(s); a manager needs at least 2",
                                         "memory: 1024 MiB of memory; a manager needs at least "
                                         "1700 MiB"]
    assert small.precheck_failures("worker") == []


@pytest.mark.parametrize("checked_as", ROLES)
@pytest.mark.parametrize("judged", ROLES)
@pytest.mark.parametrize(("cpus", "mib"), [(1, 1024), (2, 1699), (1, 1700), (2, 1700), (0, 512)])
def test_the_coordinator_and_the_node_agree_on_every_minimum(
        checked_as: Role, judged: Role, cpus: int, mib: int) -> None:
    """What the node would say checking `judged` itself is what the coordinator says of a
    report checked for another role: one definition serves both."""
    report = precheck_report("n1", checked_as, cpus=cpus, memory=mib * MiB)
    short = fitness(report, judged).short
    assert any(s.startswith("cpu:") for s in short) == \
        (evaluate_cpu(cpus, judged).status is Status.FAIL)
    assert any(s.startswith("memory:") for s in short) == \
        (evaluate_memory(mib * MiB, judged).status is Status.FAIL)


def test_a_minimum_the_node_was_told_to_ignore_is_ignored_for_every_role() -> None:
    report = precheck_report("m1", "manager", **SMALL)
    for check in report["checks"]:
        if check["name"] == "cpu":
            check.update(status="warn", ignored=True)
    assert fitness(report, "manager").problems == [
        "memory: 1024 MiB of memory; a manager needs at least 1700 MiB"]


def test_a_report_without_measured_values_gets_an_answer_not_a_traceback() -> None:
    report = precheck_report("m1", "worker")
    for check in report["checks"]:
        if check["name"] in ("cpu", "memory"):
            check["data"] = {}  # e.g. an agent that does not report them
    assert fitness(report, "worker").problems == []  # the node's own verdict for its role
    assert fitness(report, "manager").unmeasured == (
        "cpu: not measured (its report, checked for a worker, carries no 'cpus' value)",
        "memory: not measured (its report, checked for a worker, carries no 'bytes' value)")
    no_checks = {**report, "checks": [c for c in report["checks"]
                                      if c["name"] not in ("cpu", "memory")]}
    assert len(fitness(no_checks, "manager").unmeasured) == 2
    assert fitness({}, "manager").problems == ["precheck report missing or invalid"]


def test_the_refusal_names_the_machine_each_minimum_and_what_to_do() -> None:
    text = refusal(pending(**SMALL), "manager")
    assert text is not None
    assert text.startswith("m1 cannot run as a manager: hard prechecks failed: "
                           "cpu: 1 CPU(s); a manager needs at least 2; "
                           "memory: 1024 MiB of memory; a manager needs at least 1700 MiB.")
    assert "approve it as a worker instead" in text
    assert "give the host what it lacks and restart its agent" in text
    assert "`nodeagent precheck --role manager` on the host changes nothing" in text
    assert refusal(pending(**SMALL), "worker") is None


def test_the_refusal_of_an_unmeasured_minimum_says_how_to_have_it_measured() -> None:
    report = precheck_report("m1", "worker")
    report["checks"] = [c for c in report["checks"] if c["name"] != "cpu"]
    text = refusal(replace(pending(), precheck=report), "manager")
    assert text is not None and "cpu: not measured" in text
    assert "set `role: manager` in its agent's config and restart the agent" in text
    assert "changes nothing" not in text


def test_other_failures_are_refused_as_before_without_advice_on_minimums() -> None:
    text = refusal(pending(failing=FOREIGN_OS), None)
    assert text == "m1 cannot be approved: hard prechecks failed: os: Plan 9 is not supported."


def test_auto_approval_as_a_manager_waits_for_a_managers_minimums() -> None:
    small = pending(**SMALL)
    assert auto_approved(AUTO_MANAGER, small, 1.0) == (small, [])
    approved, events = auto_approved(AUTO_WORKER, small, 1.0)
    assert (approved.approved, approved.role) == (True, "worker")
    assert [(e.kind, e.message, e.data) for e in events] == [
        ("approved", "m1 auto-approved as worker", {"role": "worker"})]


def request(hostname: str, **report: Any) -> RegisterRequest:
    return RegisterRequest(join_token="t", hostname=hostname, ip="10.0.0.9",
                           precheck=PrecheckReport.model_validate(precheck_report(hostname, **report)))


def test_a_registration_not_auto_approved_as_a_manager_says_why() -> None:
    m1, events = decided(registered("edge", AUTO_MANAGER, None, request("m1", **SMALL),
                                    Credential("hash", None), "id-1", 5.0))
    assert not m1.approved
    assert [e.kind for e in events] == ["registered"]
    assert events[0].message.endswith("; hard prechecks failed: cpu: 1 CPU(s); a manager needs "
                                      "at least 2; memory: 1024 MiB of memory; a manager needs "
                                      "at least 1700 MiB")


def test_prechecks_that_pass_later_auto_approve_the_machine_as_registration_would() -> None:
    failing = pending(failing=FOREIGN_OS)
    report = PrecheckReport.model_validate(precheck_report("m1"))
    now_passing, events = decided(prechecked(AUTO_WORKER, failing, report, 7.0))
    assert (now_passing.approved, now_passing.role) == (True, "worker")
    assert now_passing.generation == failing.generation + 1
    assert [(e.kind, e.message) for e in events] == [
        ("precheck", "m1 prechecks now pass"), ("approved", "m1 auto-approved as worker")]

    by_hand, events = decided(prechecked(ClusterSettings(), failing, report, 7.0))
    assert not by_hand.approved and [e.kind for e in events] == ["precheck"]

    still_small, events = decided(prechecked(AUTO_MANAGER, failing, PrecheckReport.model_validate(
        precheck_report("m1", **SMALL)), 7.0))
    assert not still_small.approved
    assert events[0].message.startswith("m1 prechecks still fail: cpu: 1 CPU(s)")


def test_a_machine_past_pending_takes_no_precheck_report() -> None:
    ready = machine("m1", "worker", state=MachineState.READY)
    with pytest.raises(Conflict, match="m1 is Ready: prechecks only matter before approval"):
        prechecked(AUTO_WORKER, ready, PrecheckReport.model_validate(precheck_report("m1")), 1.0)


# Auto-approval (what a registration and every later precheck report of a Pending machine
# apply), as a table: the cluster's settings, what m1's node measured, the role an operator
# set by hand, and the role it is approved as (None: it waits Pending).
AUTO_APPROVALS = [
    pytest.param(AUTO_WORKER, SMALL, None, "worker", id="a small node as the cluster's worker"),
    pytest.param(AUTO_MANAGER, SMALL, None, None,
                 id="a node short of a manager's minimums waits"),
    pytest.param(AUTO_MANAGER, {}, None, "manager", id="a node fit for a manager"),
    pytest.param(ClusterSettings(), {}, None, None, id="no auto-approval: the operator decides"),
    pytest.param(AUTO_WORKER, {"failing": FOREIGN_OS}, None, None,
                 id="a hard precheck failing waits"),
    pytest.param(AUTO_WORKER, SMALL, "manager", None,
                 id="a role set by hand is judged, not the cluster's"),
]


@pytest.mark.parametrize(("settings", "report", "role", "approved_as"), AUTO_APPROVALS)
def test_auto_approval_table(settings: ClusterSettings, report: dict[str, Any],
                             role: Role | None, approved_as: Role | None) -> None:
    m1 = replace(pending(**report), role=role)
    after, events = auto_approved(settings, m1, 1.0)
    assert (after.role if after.approved else None) == approved_as
    assert [e.kind for e in events] == (["approved"] if approved_as else [])


# Why an operator's approval is refused (refusal), as a table: what m1's node measured and
# found, the role asked for, and what the refusal says (None: approved).
REFUSALS = [
    pytest.param(SMALL, (), "worker", None, id="a small node as a worker"),
    pytest.param({}, (), "manager", None, id="a node fit for a manager"),
    pytest.param(SMALL, (), "manager", "m1 cannot run as a manager: hard prechecks failed: cpu:",
                 id="a small node as a manager"),
    pytest.param(SMALL, (), "manager", "It meets a worker's minimums: approve it as a worker",
                 id="and the refusal says what it can be"),
    pytest.param({"failing": FOREIGN_OS}, (), None,
                 "m1 cannot be approved: hard prechecks failed: os: Plan 9",
                 id="an unsupported OS, whatever the role"),
    pytest.param({}, ("product_uuid: held by w9",), "worker",
                 "hard prechecks failed: product_uuid: held by w9",
                 id="a clone of another machine"),
]


@pytest.mark.parametrize(("report", "clones", "role", "told"), REFUSALS)
def test_refusal_table(report: dict[str, Any], clones: tuple[str, ...], role: Role | None,
                       told: str | None) -> None:
    refused = refusal(replace(pending(**report), clones=clones), role)
    if told is None:
        assert refused is None
    else:
        assert refused is not None and told in refused, refused


@pytest.mark.parametrize(("approving", "role", "labels", "interface", "refused"), [
    (pending(), "worker", {"zone": "a"}, None, None),
    (pending(**SMALL), "worker", None, None, None),
    (pending(**SMALL), "manager", None, None, "m1 cannot run as a manager"),
    (replace(pending(), state=MachineState.READY), "worker", None, None,
     "m1 is Ready, not Pending"),
    (pending(), "worker", None, "eth9", "interface: eth9 is not an interface of m1"),
], ids=["approved-with-labels", "fits-a-worker", "short-of-a-manager", "not-pending",
        "no-such-interface"])
def test_an_approval_is_one_change_or_refused_with_nothing_written(
        approving: Machine, role: Role, labels: dict[str, str] | None, interface: str | None,
        refused: str | None) -> None:
    """`machines approve`: the machine approved as the role, its labels added, the event,
    and a pass asked for (which starts it); else Conflict saying why."""
    if refused is not None:
        with pytest.raises(Conflict, match=refused):
            approval(approving, role, labels, interface, None, 30.0)
        return
    change = approval(approving, role, labels, interface, None, 30.0)
    [approved] = change.machines
    assert (approved.approved, approved.role, approved.labels) == (
        True, role, {**approving.labels, **(labels or {})})
    assert [(e.kind, e.message, e.time) for e in change.events] == [
        ("approved", f"m1 approved as {role}", 30.0)]
    assert (change.kick, list(change.wake)) == (True, [])


@pytest.mark.parametrize(("given", "role", "refused"), [
    (pending(), "manager", None),  # not approved yet: judged when approved
    (replace(pending(**SMALL), approved=True), "worker", None),
    (replace(pending(**SMALL), approved=True), "manager", "m1 cannot run as a manager"),
    (replace(pending(), state=MachineState.PREPARE), "worker",
     "m1 is Prepare: its role is fixed once it left Pending"),
], ids=["unapproved-any-role", "approved-fits", "approved-short", "left-pending"])
def test_a_role_set_is_one_change_or_refused(given: Machine, role: Role,
                                             refused: str | None) -> None:
    if refused is not None:
        with pytest.raises(Conflict, match=refused):
            role_set(given, role, 30.0)
        return
    change = role_set(given, role, 30.0)
    assert [m.role for m in change.machines] == [role]
    assert [(e.kind, e.message, e.data) for e in change.events] == [
        ("role", f"m1 role set to {role}", {"role": role})]
    assert (change.kick, list(change.wake)) == (True, [])


# Prechecks decided whole, as a table: the machine's state, whether the report is the one
# after Prepare (--prepared), whether it passes, and the events of the one change (or the
# refusal).
PASSING, FAILING = precheck_report("m1"), precheck_report("m1", failing=FOREIGN_OS)


@pytest.mark.parametrize(("state", "prepared", "report", "kinds", "refused"), [
    (MachineState.PENDING, None, PASSING, ["precheck", "approved"], None),
    (MachineState.PENDING, None, FAILING, ["precheck"], None),
    (MachineState.PREPARE, True, PASSING, ["precheck"], None),
    (MachineState.PENDING, True, PASSING, [], "those before approval"),
    (MachineState.PREPARE, None, PASSING, [], r"those after Prepare \(--prepared\)"),
    (MachineState.READY, None, PASSING, [], "prechecks only matter before approval"),
], ids=["pending-passes", "pending-fails", "after-prepare", "pending-sent-prepared",
        "prepare-sent-unprepared", "ready"])
def test_a_precheck_report_is_one_change_or_refused(
        state: MachineState, prepared: bool | None, report: dict[str, Any], kinds: list[str],
        refused: str | None) -> None:
    m1 = replace(pending(), state=state, approved=state is not MachineState.PENDING)
    sent = PrecheckReport.model_validate({**report, "prepared": prepared})
    change = change_or_refusal(lambda: prechecked(AUTO_WORKER, m1, sent, 7.0), refused)
    if change is None:
        return
    [updated] = change.machines
    assert (updated.id, updated.generation) == (m1.id, m1.generation + 1)
    assert updated.precheck == sent.model_dump(mode="json", by_alias=True)
    assert [e.kind for e in change.events] == kinds
    assert (change.kick, list(change.wake), change.token_use) == (True, [], None)
