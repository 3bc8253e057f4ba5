"""The planner's rules, one scenario each."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import DrainStage, DrainStatus, ItemProgress, Machine, MachineState
from coordinator.domain.rollout.planner import Decision, enact, node_action, plan, plan_to_fixpoint
from tests.support.builders import (
    KUBE_ACCESS,
    cluster,
    finish_phase,
    items,
    machine,
    moves,
    node_down,
    upgraded_cluster,
)

P, PREP, DEP, READY = MachineState.PENDING, MachineState.PREPARE, MachineState.DEPLOY, MachineState.READY


def test_approved_machine_with_role_and_passing_prechecks_starts_prepare() -> None:
    decisions = plan(cluster(), [machine("w1")])
    assert moves(decisions) == [("w1", PREP)]
    assert decisions[0].from_state is P
    assert decisions[0].reason == "approved as worker: prepare"


@pytest.mark.parametrize(
    "blocked",
    [
        machine("w1", approved=False),
        machine("w1", role=None),
        machine("w1", hard_failure=True),
        replace(machine("w1"), precheck={}),
    ],
    ids=["unapproved", "no-role", "hard-precheck-failure", "no-precheck-report"],
)
def test_machine_stays_pending_until_it_may_join(blocked: Machine) -> None:
    assert plan(cluster(), [blocked]) == []


def test_prepare_starts_on_every_approved_machine_at_once() -> None:
    fleet = [machine(f"w{i}") for i in range(120)] + [machine("m1", "manager")]
    decisions = plan(cluster(batch=2), fleet)
    assert len(decisions) == 121
    assert {d.to_state for d in decisions} == {PREP}


def test_prepare_must_finish_before_deploy() -> None:
    spec = cluster(manager=items("prepare", 2))
    m1 = machine("m1", "manager", state=PREP)
    half = replace(m1, applied=frozenset({spec.items("manager", "prepare")[0].fingerprint()}))
    assert plan(spec, [half]) == []
    assert moves(plan(spec, [finish_phase(spec, m1)])) == [("m1", DEP)]


def test_first_manager_deploys_alone() -> None:
    fleet = [
        machine("w1", state=PREP, created_at=1),
        machine("m2", "manager", state=PREP, created_at=3),
        machine("m1", "manager", state=PREP, created_at=2),
        machine("w2", state=PREP, created_at=4),
    ]
    decisions = plan(cluster(), fleet)
    assert moves(decisions) == [("m1", DEP)]
    assert decisions[0].reason == "first manager deploys alone"


def test_first_manager_waits_while_any_machine_deploys() -> None:
    # A worker left deploying after the only deployed manager was deleted.
    spec = cluster(worker=items("deploy", 1))
    fleet = [machine("w1", state=DEP), machine("m1", "manager", state=PREP)]
    assert plan(spec, fleet) == []
    assert moves(plan(spec, [finish_phase(spec, fleet[0]), fleet[1]])) == [("w1", READY), ("m1", DEP)]


def test_workers_wait_for_the_first_manager() -> None:
    spec = cluster(manager=items("deploy", 1))
    workers = [machine(f"w{i}", state=PREP) for i in range(3)]
    m1 = machine("m1", "manager", state=DEP)
    assert plan(spec, [m1, *workers]) == []
    assert moves(plan(spec, [finish_phase(spec, m1), *workers])) == [
        ("m1", READY), ("w0", DEP), ("w1", DEP), ("w2", DEP),
    ]


def test_remaining_managers_deploy_one_at_a_time() -> None:
    spec = cluster(manager=items("deploy", 1))
    m1 = machine("m1", "manager", state=READY)
    others = [machine(f"m{i}", "manager", state=PREP, created_at=i) for i in (2, 3, 4)]
    decisions = plan(spec, [m1, *others])
    assert moves(decisions) == [("m2", DEP)]
    assert decisions[0].reason == "next manager deploys (one at a time)"
    fleet = enact([m1, *others], decisions, now=5.0)
    assert plan(spec, fleet) == []


def test_no_manager_joins_while_a_managers_node_is_down() -> None:
    """etcd asks for a failed member to be removed before another is added: the next manager
    waits until the Node is Ready again (or its manager deleted); workers still join."""
    spec = cluster(manager=items("deploy", 1), worker=items("deploy", 1),
                   kubernetes={"kubeconfig": "/etc/kubeconfig"})
    m1 = node_down(spec, machine("m1", "manager", state=READY))
    waiting = [machine("m2", "manager", state=PREP, created_at=2),
               machine("w1", state=PREP, created_at=3)]
    assert moves(plan(spec, [m1, *waiting])) == [("w1", DEP)]
    assert moves(plan(spec, [machine("m1", "manager", state=READY), *waiting])) == [
        ("m2", DEP), ("w1", DEP)]

def test_workers_deploy_in_batches_alongside_a_second_manager() -> None:
    spec = cluster(worker=items("deploy", 1), manager=items("deploy", 1), batch=3)
    fleet = [
        machine("m1", "manager", state=READY),
        machine("m2", "manager", state=PREP),
        machine("w0", state=DEP),
        *(machine(f"w{i}", state=PREP, created_at=i) for i in range(1, 8)),
    ]
    decisions = plan(spec, fleet)
    assert moves(decisions) == [("m2", DEP), ("w1", DEP), ("w2", DEP)]
    assert decisions[-1].reason == "worker deploys (3 of 3 worker slots)"
    fleet = enact(fleet, decisions, now=1.0)
    assert plan(spec, fleet) == []
    fleet = [finish_phase(spec, m) if m.hostname in ("w1", "w2") else m for m in fleet]
    assert moves(plan(spec, fleet)) == [("w1", READY), ("w2", READY), ("w3", DEP), ("w4", DEP)]


def test_upgrade_is_left_alone_and_counts_as_deployed() -> None:
    fleet = [machine("m1", "manager", state=MachineState.UPGRADE), machine("w1", state=PREP)]
    assert moves(plan(cluster(**KUBE_ACCESS), fleet)) == [("w1", DEP)]


def test_a_reconfiguring_manager_counts_as_deployed() -> None:
    spec = cluster(manager=items("reconfigure", 1))
    fleet = [machine("m1", "manager", state=MachineState.RECONFIGURE), machine("w1", state=PREP)]
    assert moves(plan(spec, fleet)) == [("w1", DEP)]


def test_reconfigure_returns_to_ready_once_applied() -> None:
    spec = cluster(worker=items("reconfigure", 2))
    w1 = machine("w1", state=MachineState.RECONFIGURE)
    assert plan(spec, [w1]) == []
    decisions = plan(spec, [finish_phase(spec, w1)])
    assert moves(decisions) == [("w1", READY)]
    assert decisions[0].reason == "reconfigure items applied"


def test_a_failing_machine_stays_put_and_the_others_go_on() -> None:
    spec = cluster(worker=items("deploy", 1), batch=2)
    failing = replace(
        machine("w1", state=DEP),
        progress=ItemProgress(item="deploy-0", attempt=4, status="failed", error="exit 1"),
    )
    fleet = [machine("m1", "manager", state=READY), failing,
             finish_phase(spec, machine("w2", state=DEP)), machine("w3", state=PREP)]
    assert moves(plan(spec, fleet)) == [("w2", READY), ("w3", DEP)]


def test_delete_flow_removes_the_record_once_reset_items_are_applied() -> None:
    spec = cluster(worker=items("reset", 1))
    w1 = machine("w1", state=MachineState.DELETING)
    keep = machine("w2", state=READY)
    assert plan(spec, [w1, keep]) == []
    decisions = plan(spec, [finish_phase(spec, w1), keep])
    assert decisions == [Decision("id-w1", "w1", MachineState.DELETING, None,
                                  "reset items applied: machine removed")]
    assert enact([finish_phase(spec, w1), keep], decisions, now=1.0) == [keep]


def test_empty_phases_complete_through_plan_to_fixpoint() -> None:
    fleet = [machine("m1", "manager"), machine("m2", "manager", created_at=1),
             machine("w1", created_at=2), machine("w2", approved=False)]
    final, decisions = plan_to_fixpoint(cluster(batch=1), fleet, now=7.0)
    assert {m.hostname: m.state for m in final} == {"m1": READY, "m2": READY, "w1": READY, "w2": P}
    assert all(m.state_since == 7.0 for m in final if m.state is READY)
    deploys = [d.hostname for d in decisions if d.to_state is DEP]
    assert deploys == ["m1", "m2", "w1"]
    assert plan_to_fixpoint(cluster(), final, now=8.0) == (final, [])


def test_plan_to_fixpoint_stops_after_max_passes() -> None:
    fleet = [machine("m1", "manager")]
    final, decisions = plan_to_fixpoint(cluster(), fleet, now=1.0, max_passes=2)
    assert [m.state for m in final] == [DEP]
    assert moves(decisions) == [("m1", PREP), ("m1", DEP)]


def test_plan_ignores_the_order_machines_come_in() -> None:
    spec = cluster(batch=2)
    fleet = [machine("m1", "manager", state=READY),
             *(machine(f"w{i}", state=PREP, created_at=i % 3) for i in range(6))]
    assert plan(spec, fleet) == plan(spec, fleet[::-1])
    assert moves(plan(spec, fleet)) == [("w0", DEP), ("w3", DEP)]


def test_enact_refuses_a_decision_planned_on_a_stale_snapshot() -> None:
    w1 = machine("w1")
    decisions = plan(cluster(), [w1])
    moved = enact([w1], decisions, now=1.0)
    assert moved[0].generation == w1.generation + 1
    with pytest.raises(ValueError, match="decision from Pending"):
        enact(moved, decisions, now=2.0)


# What the coordinator's Kubernetes side owes a machine's node now (node_action), as a table:
# the machine's role and state, its drain's stage, whether its upgrade (or reset) items are
# applied, the cluster's drain settings, and the action (None: nothing, the node waits).
UPGRADE, DELETING = MachineState.UPGRADE, MachineState.DELETING
# drains: the cluster's drain.enabled and upgrade.drainManagers, by name.
DRAINS: dict[str, tuple[dict[str, object], dict[str, object]]] = {
    "on": (KUBE_ACCESS, {}), "off": ({**KUBE_ACCESS, "drain": {"enabled": False}}, {}),
    "workers only": (KUBE_ACCESS, {"drain_managers": False}), "no access": ({}, {})}
NODE_ACTIONS = [
    pytest.param("worker", UPGRADE, None, False, "on", "drain",
                 id="an upgrade starts with cordon and drain"),
    pytest.param("worker", UPGRADE, DrainStage.DRAINING, False, "on", "drain",
                 id="a drain under way goes on"),
    pytest.param("worker", UPGRADE, DrainStage.BLOCKED, False, "on", None,
                 id="a blocked drain waits for the operator"),
    pytest.param("worker", UPGRADE, DrainStage.DRAINED, False, "on", None,
                 id="drained: the upgrade items run, the node stays cordoned"),
    pytest.param("worker", UPGRADE, DrainStage.DRAINED, True, "on", "uncordon",
                 id="upgrade items applied: uncordon"),
    pytest.param("worker", UPGRADE, DrainStage.SKIPPED, True, "on", "uncordon",
                 id="drain skipped, items applied: uncordon"),
    pytest.param("worker", UPGRADE, DrainStage.UNCORDONED, True, "on", "await-ready",
                 id="uncordoned: wait for the node to be Ready"),
    pytest.param("worker", UPGRADE, DrainStage.NOT_READY, True, "on", "await-ready",
                 id="not Ready in time: still checked"),
    pytest.param("worker", UPGRADE, DrainStage.NODE_READY, True, "on", None,
                 id="Ready again: nothing more"),
    pytest.param("worker", UPGRADE, None, False, "off", None,
                 id="drains disabled: an upgrade in place"),
    pytest.param("worker", UPGRADE, None, False, "no access", None,
                 id="no Kubernetes access: an upgrade in place, drains skipped"),
    pytest.param("manager", UPGRADE, None, False, "workers only", None,
                 id="managers not drained: a manager upgrades in place"),
    pytest.param("manager", UPGRADE, None, False, "on", "drain", id="managers drained too"),
    pytest.param("worker", READY, None, False, "on", None, id="a Ready machine owes nothing"),
    pytest.param("worker", DELETING, DrainStage.DRAINING, False, "on", "drain",
                 id="a removal drains first"),
    pytest.param("worker", DELETING, None, False, "on", None,
                 id="a removal without Kubernetes access: nothing"),
]


@pytest.mark.parametrize(("role", "state", "stage", "done", "drains", "action"), NODE_ACTIONS)
def test_node_action_table(role: str, state: MachineState, stage: DrainStage | None, done: bool,
                           drains: str, action: str | None) -> None:
    settings, upgrade = DRAINS[drains]
    spec = upgraded_cluster(cluster(**settings), **upgrade)
    m = replace(machine("n1", role, state=READY), state=state,  # type: ignore[arg-type]
                drain=DrainStatus(stage, 1.0) if stage else None)
    if done:
        m = finish_phase(spec, m)
    assert node_action(spec, m) == action
