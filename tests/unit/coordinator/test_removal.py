"""Removing a machine safely: the quorum guard, case by case, and the order a removal takes
in the planner and the assignment (drain, reset items, Node deletion, record removed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.assignments.assignment import assigned_phase
from coordinator.domain.model import DrainStage, DrainStatus, Machine, MachineState
from coordinator.domain.nodes.removal import node_deletion_due, quorum_refusal, removal_drain
from coordinator.domain.rollout.planner import Decision, node_action, plan
from tests.support.builders import (
    at_release,
    cluster,
    drained,
    finish_phase,
    items,
    machine,
    upgraded_cluster,
)

S = MachineState


def managers(*states: MachineState) -> list[Machine]:
    """Managers m1, m2... in these states, in registration order."""
    return [machine(f"m{i}", "manager", state=s, created_at=i) for i, s in enumerate(states, 1)]


def test_deleting_one_of_three_ready_managers_is_allowed() -> None:
    fleet = managers(S.READY, S.READY, S.READY)
    assert quorum_refusal(fleet[2], fleet) is None


def test_deleting_one_of_two_ready_managers_is_refused_naming_the_numbers() -> None:
    fleet = managers(S.READY, S.READY)
    assert quorum_refusal(fleet[1], fleet) == (
        "deleting m2 would leave 1 of the 2 deployed managers, fewer than a majority (2): etcd "
        "could lose its quorum. Add a manager first, or delete it anyway with force "
        "(coordinator delete --force)")


def test_deleting_the_last_manager_is_refused() -> None:
    fleet = [*managers(S.READY), machine("w1", state=S.READY)]
    refused = quorum_refusal(fleet[0], fleet)
    assert refused is not None and refused.startswith("m1 is the last deployed manager")


def test_four_managers_may_lose_one_as_three_are_a_majority() -> None:
    fleet = managers(S.READY, S.READY, S.READY, S.READY)
    assert quorum_refusal(fleet[0], fleet) is None


@pytest.mark.parametrize("state", [S.DEPLOY, S.UPGRADE, S.RECONFIGURE, S.DELETING])
def test_a_manager_may_not_leave_while_another_is_not_ready(state: MachineState) -> None:
    fleet = managers(S.READY, S.READY, S.READY, state)
    refused = quorum_refusal(fleet[0], fleet)
    assert refused is not None and f"m4 is {state.value}" in refused
    assert "managers leave one at a time" in refused


def test_a_manager_may_not_leave_while_another_does_not_answer() -> None:
    fleet = managers(S.READY, S.READY, S.READY)
    fleet[2] = replace(fleet[2], responding=False)
    refused = quorum_refusal(fleet[0], fleet)
    assert refused is not None and "m3 is not responding" in refused


def test_a_manager_not_deploying_yet_and_workers_always_may_go() -> None:
    fleet = [*managers(S.READY, S.PREPARE, S.UPGRADE), machine("w1", state=S.READY)]
    assert quorum_refusal(fleet[1], fleet) is None
    assert quorum_refusal(fleet[3], fleet) is None


def test_a_deploying_manager_waits_for_the_others_but_not_for_the_count() -> None:
    fleet = managers(S.READY, S.DEPLOY)
    assert quorum_refusal(fleet[1], fleet) is None


SPEC = cluster(worker=items("reset", 1))
KUBE = cluster(worker=items("reset", 1), kubernetes={"kubeconfig": "/etc/k.conf"})


def leaving() -> Machine:
    w1 = machine("w1", state=S.READY)
    return replace(w1, state=S.DELETING, drain=removal_drain(KUBE, [w1], w1, 5.0))


def test_without_kubernetes_access_a_removal_records_no_drain() -> None:
    w1 = machine("w1", state=S.READY)
    assert removal_drain(SPEC, [w1], w1, 5.0) is None
    reporter = replace(machine("m1", "manager", state=S.READY), kubeconfig="apiVersion: v1")
    assert removal_drain(SPEC, [w1, reporter], w1, 5.0) is not None
    assert removal_drain(SPEC, [reporter], reporter, 5.0) is None, \
        "a manager's own kubeconfig is no way in once it is leaving"


def test_with_drains_disabled_a_removal_skips_the_drain_but_not_the_node_deletion() -> None:
    spec = cluster(worker=items("reset", 1), kubernetes={"kubeconfig": "/k"},
                   drain={"enabled": False})
    w1 = machine("w1", state=S.READY)
    status = removal_drain(spec, [w1], w1, 5.0)
    assert status is not None and status.stage is DrainStage.SKIPPED
    gone = finish_phase(spec, replace(w1, state=S.DELETING, drain=status))
    assert node_action(spec, gone) == "delete-node"


def test_reset_items_wait_for_the_drain() -> None:
    w1 = leaving()
    assert node_action(KUBE, w1) == "drain"
    assert assigned_phase(KUBE, w1, None) is None, "reset items handed out before the drain"
    blocked = drained(w1, DrainStage.BLOCKED)
    assert assigned_phase(KUBE, blocked, None) is None and node_action(KUBE, blocked) is None
    assert assigned_phase(KUBE, drained(w1), None) == "reset"
    assert assigned_phase(KUBE, drained(w1, DrainStage.SKIPPED), None) == "reset"


def test_the_node_is_deleted_only_once_the_reset_items_are_applied() -> None:
    w1 = drained(leaving())
    assert node_action(KUBE, w1) is None
    assert plan(KUBE, [w1]) == []
    assert node_action(KUBE, finish_phase(KUBE, w1)) == "delete-node"


def test_the_record_waits_for_the_node_deletion() -> None:
    reset = finish_phase(KUBE, drained(leaving()))
    assert plan(KUBE, [reset]) == [], "removed before its Node was deleted"
    gone = replace(reset, drain=DrainStatus(DrainStage.NODE_DELETED, 0.0,
                                            message="node w1 deleted"))
    assert node_action(KUBE, gone) is None
    assert plan(KUBE, [gone]) == [Decision(
        "id-w1", "w1", S.DELETING, None,
        "reset items applied, node w1 deleted: machine removed")]


def test_without_a_drain_a_removal_is_as_before() -> None:
    w1 = machine("w1", state=S.DELETING)
    assert node_action(SPEC, w1) is None
    assert assigned_phase(SPEC, w1, None) == "reset"
    assert [d.to_state for d in plan(SPEC, [finish_phase(SPEC, w1)])] == [None]


def test_while_a_manager_leaves_no_other_manager_deploys_or_upgrades_but_workers_go_on() -> None:
    """Its etcd member is being removed: another member joining or restarting then could cost
    the quorum. Once it is gone, both go ahead."""
    spec = cluster(manager=[*items("prepare", 1), *items("deploy", 1), *items("reset", 1)],
                   worker=[*items("prepare", 1), *items("deploy", 1)])
    newer = upgraded_cluster(spec)
    m1 = at_release(newer, machine("m1", "manager", state=S.READY, created_at=1))
    m2 = machine("m2", "manager", state=S.DELETING, created_at=2)
    m3 = finish_phase(spec, machine("m3", "manager", state=S.PREPARE, created_at=3))
    m4 = machine("m4", "manager", state=S.READY, created_at=4)  # behind: due for an upgrade
    w1 = finish_phase(spec, machine("w1", state=S.PREPARE, created_at=5))
    admitted = {d.hostname: d.to_state for d in plan(newer, [m1, m2, m3, m4, w1])}
    assert admitted == {"w1": S.DEPLOY}
    admitted = {d.hostname: d.to_state for d in plan(newer, [m1, m3, m4, w1])}
    assert admitted["m3"] is S.DEPLOY, "once it is gone the next manager deploys"


# The quorum guard as a table: the managers (state, answering), which one the operator
# deletes, and what they are told. "" means the deletion goes ahead.
R, D, P = S.READY, S.DEPLOY, S.PREPARE
QUORUM = [
    pytest.param([R, R, R], [], 2, "", id="one of three Ready managers goes"),
    pytest.param([R, R, R, R], [], 0, "", id="one of four goes: three are a majority"),
    pytest.param([R, R, R, R, R], [], 4, "", id="one of five goes"),
    pytest.param([R, R], [], 1, "would leave 1 of the 2 deployed managers, fewer than a "
                 "majority (2)", id="one of two refused: etcd would lose its quorum"),
    pytest.param([R], [], 0, "m1 is the last deployed manager", id="the last manager refused"),
    pytest.param([R, R, R, S.UPGRADE], [], 0, "m4 is Upgrade",
                 id="refused while another manager upgrades"),
    pytest.param([R, R, R, S.DELETING], [], 0, "m4 is Deleting",
                 id="refused while another manager leaves"),
    pytest.param([R, R, R], [2], 0, "m3 is not responding",
                 id="refused while another manager does not answer"),
    pytest.param([R, R, S.UPGRADE], [2], 0, "m3 is not responding",
                 id="an upgrading manager that does not answer is named silent"),
    pytest.param([R, P, R], [], 1, "", id="a manager not deploying yet is no member"),
    pytest.param([R, D], [], 1, "", id="a deploying manager is not counted in the quorum"),
    pytest.param([R, D], [], 0, "m2 is Deploy",
                 id="but a Ready one waits for a deploying one"),
    pytest.param([R, R, S.PENDING], [], 0, "would leave 1 of the 2 deployed managers",
                 id="a Pending manager is no member: it does not make a majority"),
]


@pytest.mark.parametrize(("states", "silent", "leaving", "told"), QUORUM)
def test_quorum_refusal_table(states: list[MachineState], silent: list[int], leaving: int,
                              told: str) -> None:
    fleet = managers(*states)
    for i in silent:
        fleet[i] = replace(fleet[i], responding=False)
    fleet.append(machine("w1", state=S.DEPLOY))  # a worker never counts
    refused = quorum_refusal(fleet[leaving], fleet)
    if not told:
        assert refused is None
    else:
        assert refused is not None and told in refused, refused
        assert "coordinator delete --force" in refused, "the way out is named"


def test_workers_are_never_held_by_the_quorum_guard() -> None:
    fleet = [*managers(S.READY), machine("w1", state=S.READY)]
    fleet[0] = replace(fleet[0], responding=False)
    assert quorum_refusal(fleet[1], fleet) is None


# What a machine entering Deleting records of its node: the Kubernetes API reachable or not
# (a cluster kubeconfig, or one another manager reported), drains enabled or not.
REPORTED = replace(machine("m1", "manager", state=S.READY), kubeconfig="apiVersion: v1")
REMOVAL_DRAIN = [
    pytest.param({}, False, None, id="no way to Kubernetes: no drain, reset items at once"),
    pytest.param({"kubernetes": {"kubeconfig": "/k"}}, False, DrainStage.DRAINING,
                 id="cluster kubeconfig: cordon and drain first"),
    pytest.param({}, True, DrainStage.DRAINING,
                 id="a manager reported a kubeconfig: cordon and drain first"),
    pytest.param({"kubernetes": {"kubeconfig": "/k"}, "drain": {"enabled": False}}, False,
                 DrainStage.SKIPPED, id="drains disabled: skipped, the Node still deleted"),
]


@pytest.mark.parametrize(("settings", "reporter", "stage"), REMOVAL_DRAIN)
def test_removal_drain_table(settings: dict[str, object], reporter: bool,
                             stage: DrainStage | None) -> None:
    spec = cluster(worker=items("reset", 1), **settings)  # type: ignore[arg-type]
    w1 = machine("w1", state=S.READY)
    status = removal_drain(spec, [w1, REPORTED] if reporter else [w1], w1, 5.0)
    assert (status.stage if status else None) is stage
    assert status is None or status.started_at == 5.0


# When a leaving machine's Node is deleted: its drain over and its reset items applied.
NODE_DELETION = [
    pytest.param(S.DELETING, DrainStage.DRAINED, True, True, id="drained and reset: deleted"),
    pytest.param(S.DELETING, DrainStage.SKIPPED, True, True,
                 id="drain skipped and reset: deleted"),
    pytest.param(S.DELETING, DrainStage.DRAINED, False, False,
                 id="drained, reset items pending: waits"),
    pytest.param(S.DELETING, DrainStage.DRAINING, True, False, id="still draining: waits"),
    pytest.param(S.DELETING, DrainStage.BLOCKED, True, False,
                 id="drain blocked by a PodDisruptionBudget: waits"),
    pytest.param(S.DELETING, DrainStage.NODE_DELETED, True, False, id="Node already deleted"),
    pytest.param(S.DELETING, None, True, False, id="no Kubernetes side: no Node to delete"),
    pytest.param(S.UPGRADE, DrainStage.DRAINED, True, False,
                 id="an upgrade's drain never deletes the Node"),
]


@pytest.mark.parametrize(("state", "stage", "reset", "due"), NODE_DELETION)
def test_node_deletion_due_table(state: MachineState, stage: DrainStage | None, reset: bool,
                                 due: bool) -> None:
    w1 = replace(machine("w1", state=S.READY), state=state,
                 drain=DrainStatus(stage, 1.0) if stage else None)
    if reset:
        w1 = finish_phase(KUBE, w1)
    assert node_deletion_due(KUBE, w1) is due
