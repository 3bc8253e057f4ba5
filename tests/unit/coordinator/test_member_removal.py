"""A leaving manager's etcd member, through the pure domain: removed by a remaining Ready
manager's leave job (verified gone by its items) before the leaving manager's reset items may
wipe its data; when no manager can, the removal stops with a note naming the member and the
remedy, and the record stays."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.assignments.assignment import AssignmentInputs, assigned_phase, build_assignment
from coordinator.domain.assignments.minting import mint_pass
from coordinator.domain.assignments.reports import fold_report
from coordinator.domain.model import (
    ClusterSpec,
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
)
from coordinator.domain.records import Event, StoredCluster
from coordinator.domain.rollout.planner import plan
from coordinator.domain.rollout.remedies import machine_note
from coordinator.domain.rollout.steps import machine_step
from coordinator.domain.specs.specs import load_spec
from nodeagent.wire.protocol import ItemReport
from tests.support.builders import decided, finish_phase, machine

S = MachineState

SPEC_TEXT = """\
name: edge
release: "1"
machineTypes:
  manager:
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
    - name: etcd-member-remove
      phase: leave
      action: {type: exec, argv: [etcdctl, member, remove, "${joiner.hostname}", "${joiner.ip}"]}
    - {name: kubeadm-reset, phase: reset, action: {type: exec, argv: [kubeadm, reset, -f]}}
  worker:
    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}
"""
SPEC = load_spec(SPEC_TEXT)
LEAVE_ITEM = """\
    - name: etcd-member-remove
      phase: leave
      action: {type: exec, argv: [etcdctl, member, remove, "${joiner.hostname}", "${joiner.ip}"]}
"""


def managers(count: int) -> list[Machine]:
    """Ready managers m1..m<count>, deployed in that order."""
    return [replace(machine(f"m{i}", "manager", state=S.READY, created_at=i), deploy_order=i,
                    ip=f"10.0.0.{i}") for i in range(1, count + 1)]


def leaving(m: Machine) -> Machine:
    """m in Deleting, its drain over: its reset items would run now but for its member."""
    return replace(m.with_state(S.DELETING, 5.0),
                   drain=DrainStatus(DrainStage.DRAINED, 5.0, message="drained"))


def settle(spec: ClusterSpec, machines: list[Machine], now: float
           ) -> tuple[list[Machine], list[Event]]:
    minted = mint_pass(spec, machines, now)
    changed = {m.id: m for m in minted.machines}
    return [changed.get(m.id, m) for m in machines], minted.events


def run_job(spec: ClusterSpec, manager: Machine, peers: list[Machine], status: str,
            error: str = "") -> Machine:
    """manager's agent ran its leave job's item, with this status."""
    stored = StoredCluster(spec, 1, 0.0, 0.0)
    assignment = build_assignment(AssignmentInputs(stored, manager, peers), None)
    (item,) = assignment.items
    report = ItemReport(item=item.name, fingerprint=item.fingerprint(), phase=item.phase,
                        status=status, attempt=1, started_at=1.0, finished_at=2.0,
                        exit_code=0 if status == "succeeded" else 1, error=error)
    return decided(fold_report(spec, (), manager, report, 6.0)).machine


def test_a_remaining_manager_removes_the_member_before_the_reset_items_run() -> None:
    m1, m2, m3 = managers(3)
    m3 = leaving(m3)
    assert assigned_phase(SPEC, m3, None) is None, "reset items before its member was removed"
    assert plan(SPEC, [m1, m2, finish_phase(SPEC, m3)]) == [], "removed with its member left"
    (m1, m2, m3), _ = settle(SPEC, [m1, m2, m3], 6.0)
    job = m1.minting
    assert job is not None and job.kind == "leave" and job.joiner == m3.id and m2.minting is None
    stored = StoredCluster(SPEC, 1, 0.0, 0.0)
    assignment = build_assignment(AssignmentInputs(stored, m1, [m1, m2, m3]), None)
    assert assignment.phase == "leave"
    assert [i.name for i in assignment.items] == ["etcd-member-remove"]
    assert (assignment.values["joiner.hostname"], assignment.values["joiner.ip"]) == ("m3", "10.0.0.3")
    m1 = run_job(SPEC, m1, [m1, m2, m3], "succeeded")
    (m1, m2, m3), events = settle(SPEC, [m1, m2, m3], 7.0)
    assert m3.member_gone and m1.minting is None
    assert [e.message for e in events] == [
        "etcd member of m3 removed on m1 and verified gone: its reset items run"]
    assert assigned_phase(SPEC, m3, None) == "reset"


def test_with_no_remaining_manager_ready_the_removal_stops_naming_the_member() -> None:
    m1, m2, m3 = managers(3)
    m1, m2, m3 = replace(m1, responding=False), replace(m2, state=S.UPGRADE), leaving(m3)
    (m1, m2, m3), events = settle(SPEC, [m1, m2, m3], 6.0)
    assert m1.minting is None and m2.minting is None
    assert m3.member_stop == ("no remaining manager is Ready and answering to remove its etcd "
                              "member m3")
    assert [e.message for e in events] == [f"removal of m3 stopped: {m3.member_stop}"]
    note = machine_note(SPEC, m3, machine_step(SPEC, m3, 6.0), 6.0)
    assert note.failing and note.text == f"removal stopped: {m3.member_stop}"
    assert "etcdctl member remove the ID of m3" in note.remedy
    assert "coordinator delete m3 --skip-reset" in note.remedy
    assert assigned_phase(SPEC, m3, None) is None
    assert plan(SPEC, [m1, m2, finish_phase(SPEC, m3)]) == []
    # m1 answers again: the job goes to it, and the note clears.
    (m1, m2, m3), _ = settle(SPEC, [replace(m1, responding=True), m2, m3], 7.0)
    assert m1.minting is not None and m1.minting.kind == "leave" and m3.member_stop == ""


def test_while_the_remaining_managers_reconfigure_the_removal_waits_without_a_stop_note() -> None:
    """A manager starting to leave changes the manager set: the remaining ones run their
    reconfigure items first (the kubeadm profile's local API proxy). The member's removal waits
    for them, not shown as stopped (it was, with no remedy to take), and goes to the first
    one back in Ready."""
    m1, m2, m3 = managers(3)
    m1, m2, m3 = replace(m1, responding=False), replace(m2, state=S.RECONFIGURE), leaving(m3)
    (m1, m2, m3), events = settle(SPEC, [m1, m2, m3], 6.0)
    assert m3.member_stop == "" and events == []
    assert not machine_note(SPEC, m3, machine_step(SPEC, m3, 6.0), 6.0).failing
    (m1, m2, m3), _ = settle(SPEC, [m1, m2.with_state(S.READY, 7.0), m3], 7.0)
    assert m2.minting is not None and m2.minting.kind == "leave" and m2.minting.joiner == m3.id


def test_a_failing_job_stops_the_removal_with_its_error() -> None:
    m1, m2, m3 = managers(3)
    (m1, m2, m3), _ = settle(SPEC, [m1, m2, leaving(m3)], 6.0)
    m1 = run_job(SPEC, m1, [m1, m2, m3], "failed",
                 "sh exited with 1: etcd member 8e9e05c52164694d of m3 is still in the cluster")
    (m1, m2, m3), _ = settle(SPEC, [m1, m2, m3], 7.0)
    assert m3.member_stop == ("the removal of its etcd member m3 fails on m1: sh exited with 1: "
                              "etcd member 8e9e05c52164694d of m3 is still in the cluster")
    assert not m3.member_gone and assigned_phase(SPEC, m3, None) is None


def test_the_last_manager_leaving_has_no_etcd_to_keep_whole() -> None:
    (m1,) = managers(1)
    (m1,), events = settle(SPEC, [leaving(m1)], 6.0)
    assert m1.member_gone and assigned_phase(SPEC, m1, None) == "reset"
    assert "no other manager remains" in events[0].message


def test_managers_never_deployed_and_workers_leave_as_before() -> None:
    m1, m2 = managers(2)
    prepared = leaving(replace(machine("m3", "manager", state=S.PREPARE), deploy_order=0))
    worker = leaving(machine("w1", state=S.READY))
    after, events = settle(SPEC, [m1, m2, prepared, worker], 6.0)
    assert [m.minting for m in after] == [None] * 4 and events == []
    assert assigned_phase(SPEC, prepared, None) == assigned_phase(SPEC, worker, None) == "reset"


def test_without_leave_items_a_manager_leaves_as_before() -> None:
    spec = load_spec(SPEC_TEXT.replace(LEAVE_ITEM, ""))
    assert not spec.items("manager", "leave")
    m1, m2 = managers(2)
    after, events = settle(spec, [m1, leaving(m2)], 6.0)
    assert after[0].minting is None and events == []
    assert assigned_phase(spec, after[1], None) == "reset"


@given(st.lists(st.tuples(st.sampled_from([S.READY, S.UPGRADE, S.DEPLOY, S.DELETING]),
                          st.booleans(), st.booleans()), min_size=1, max_size=5),
       st.integers(min_value=0, max_value=6))
def test_reset_items_of_a_deployed_manager_never_run_before_its_member_is_gone(
        others: list[tuple[MachineState, bool, bool]], passes: int) -> None:
    """Whatever the other managers' states, whether they answer and whether the jobs they
    are given succeed, pass after pass: the leaving manager's reset items are handed out only
    once a leave job succeeded for it, or no other manager remains to keep etcd."""
    fleet = [replace(m, state=state, responding=answers)
             for m, (state, answers, _) in zip(managers(len(others)), others, strict=True)]
    succeeds = {m.id: ok for m, (_, _, ok) in zip(fleet, others, strict=True)}
    leaver = leaving(replace(machine("mx", "manager", state=S.READY, created_at=9),
                             deploy_order=9, ip="10.0.0.9"))
    machines, succeeded = [*fleet, leaver], False
    for now in range(passes):
        machines, _ = settle(SPEC, machines, 10.0 + now)
        for index, m in enumerate(machines):
            if m.minting is not None and m.minting.kind == "leave" and m.state is S.READY:
                status = "succeeded" if succeeds[m.id] else "failed"
                machines[index] = run_job(SPEC, m, machines, status, "fails")
                succeeded = succeeded or succeeds[m.id]
        leaver = machines[-1]
        if assigned_phase(SPEC, leaver, None) == "reset":
            alone = not any(m.state in (S.READY, S.UPGRADE, S.DEPLOY) for m in machines[:-1])
            assert succeeded or alone
        assert leaver.member_gone or assigned_phase(SPEC, leaver, None) is None


def test_the_progress_of_another_item_is_no_failure_of_the_job() -> None:
    m1, m2, m3 = managers(3)
    (m1, m2, m3), _ = settle(SPEC, [m1, m2, leaving(m3)], 6.0)
    m1 = replace(m1, progress=ItemProgress("control-plane", 2, "failed", error="old"))
    (m1, m2, m3), _ = settle(SPEC, [m1, m2, m3], 7.0)
    assert m3.member_stop == ""
