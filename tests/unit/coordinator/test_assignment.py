"""Assignments and template values, without a store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.assignments.assignment import AssignmentInputs, build_assignment
from coordinator.domain.assignments.reports import reportable_items
from coordinator.domain.model import (
    ClusterSpec,
    DrainStage,
    Machine,
    MachineState,
    Role,
    phase_items,
)
from coordinator.domain.records import StoredCluster
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.rollout.planner import enact, plan, plan_to_fixpoint
from coordinator.domain.rollout.steps import current_run
from coordinator.domain.specs.templating import template_values
from tests.support.builders import (
    KUBE_ACCESS,
    cluster,
    drained,
    finish_phase,
    items,
    machine,
    upgraded_cluster,
)


def stored(spec: ClusterSpec) -> StoredCluster:
    return StoredCluster(spec=spec, generation=1, created_at=0.0, updated_at=0.0)


def test_a_machine_runs_the_items_of_its_states_phase() -> None:
    spec = cluster(worker=[*items("prepare", 2), *items("deploy", 1)])
    w1 = machine("w1", state=MachineState.PREPARE)
    assignment = build_assignment(AssignmentInputs(stored(spec), w1, []), None)
    assert assignment.phase == "prepare"
    assert [i.name for i in assignment.items] == ["prepare-0", "prepare-1"]
    assert assignment.values["machine.hostname"] == "w1"


def test_upgrade_items_wait_for_the_drain() -> None:
    spec = upgraded_cluster(cluster(worker=items("deploy", 1), **KUBE_ACCESS))
    w1 = machine("w1", state=MachineState.UPGRADE)
    assert build_assignment(AssignmentInputs(stored(spec), w1, []), None).items == []
    ready = build_assignment(AssignmentInputs(stored(spec), drained(w1, DrainStage.DRAINED), []), None)
    assert ready.phase == "upgrade" and ready.items


def test_only_the_post_deploy_host_is_assigned_the_post_deploy_step() -> None:
    spec = cluster(manager=[*items("deploy", 1), *items("postdeploy", 1)])
    m1 = machine("m1", "manager", state=MachineState.READY)
    m2 = machine("m2", "manager", state=MachineState.READY)
    inputs = AssignmentInputs(stored(spec), m1, [m1, m2])
    assert build_assignment(inputs, m1.id).phase == "postdeploy"
    assert build_assignment(inputs, m2.id).phase is None


def addressed(hostname: str, role: str, state: MachineState, created_at: float) -> Machine:
    n = hostname[1:]
    return replace(machine(hostname, role, state=state, created_at=created_at),  # type: ignore[arg-type]
                   ip=f"10.0.0.{n}")


def values_everywhere(spec: ClusterSpec, fleet: list[Machine], name: str) -> set[str]:
    """What ${name} renders on each machine of the fleet."""
    return {template_values(spec, m, fleet)[name] for m in fleet}


def test_managers_first_is_the_manager_the_planner_chose_on_every_machine() -> None:
    spec = cluster(manager=items("prepare", 1), worker=items("prepare", 1))
    slow = addressed("m1", "manager", MachineState.PREPARE, created_at=1.0)  # registered first
    fast = finish_phase(spec, addressed("m2", "manager", MachineState.PREPARE, created_at=2.0))
    fleet = [slow, fast, addressed("w3", "worker", MachineState.PREPARE, created_at=3.0)]
    assert values_everywhere(spec, fleet, "managers.first") == {""}, "named before it was chosen"
    fleet = enact(fleet, plan(spec, fleet), now=1.0)
    assert [m.state for m in fleet[:2]] == [MachineState.PREPARE, MachineState.DEPLOY]
    assert values_everywhere(spec, fleet, "managers.first") == {"10.0.0.2"}
    # Still m2 once m1 is deployed too, though m1 registered first.
    fleet, _ = plan_to_fixpoint(spec, [finish_phase(spec, m) for m in fleet], now=2.0)
    fleet, _ = plan_to_fixpoint(spec, [finish_phase(spec, m) for m in fleet], now=3.0)
    assert {m.state for m in fleet} == {MachineState.READY}
    assert values_everywhere(spec, fleet, "managers.first") == {"10.0.0.2"}


def test_managers_first_passes_to_the_manager_admitted_next_when_it_is_deleted() -> None:
    spec = cluster(manager=items("prepare", 1))
    fleet = [addressed(f"m{n}", "manager", MachineState.PREPARE, created_at=n) for n in (1, 2, 3)]
    for prepared in ("m2", "m3", "m1"):  # the order they finish Prepare in: admitted in it
        fleet = [finish_phase(spec, m) if m.hostname == prepared else m for m in fleet]
        fleet, _ = plan_to_fixpoint(spec, fleet, now=1.0)
    assert {m.state for m in fleet} == {MachineState.READY}
    assert values_everywhere(spec, fleet, "managers.first") == {"10.0.0.2"}
    leaving = [m.with_state(MachineState.DELETING, 2.0) if m.hostname == "m2" else m for m in fleet]
    assert values_everywhere(spec, leaving, "managers.first") == {"10.0.0.3"}


def test_managers_lists_the_deployed_set_that_versions_the_reconfigure_items() -> None:
    spec = cluster(worker=items("reconfigure", 1))
    fleet = [addressed("m1", "manager", MachineState.READY, 1.0),
             addressed("m2", "manager", MachineState.PREPARE, 2.0),  # approved, not deployed
             addressed("m3", "manager", MachineState.DELETING, 3.0),
             addressed("m4", "manager", MachineState.RECONFIGURE, 4.0),
             addressed("w5", "worker", MachineState.RECONFIGURE, 5.0)]
    assert values_everywhere(spec, fleet, "managers") == {"10.0.0.1,10.0.0.4"}
    assert values_everywhere(spec, fleet, "managers.hostnames") == {"m1,m4"}
    reconfigure = build_assignment(AssignmentInputs(stored(spec), fleet[-1], fleet), None)
    assert reconfigure.items == phase_items(spec, "worker", "reconfigure", ("10.0.0.1", "10.0.0.4"))


# -- phase_run: the one place a phase's items are chosen -------------------------------------

RUNS = cluster(manager=[*items("prepare", 2), *items("deploy", 1), *items("reconfigure", 1),
                        *items("reset", 1)],
               worker=[*items("prepare", 1, "w-"), *items("reconfigure", 1, "w-")])


@pytest.mark.parametrize(("state", "role", "names"), [
    (MachineState.PREPARE, "manager", ["prepare-0", "prepare-1"]),
    (MachineState.PREPARE, "worker", ["w-prepare-0"]),
    (MachineState.DEPLOY, "manager", ["deploy-0"]),
    (MachineState.RECONFIGURE, "worker", ["w-reconfigure-0"]),
    (MachineState.DELETING, "manager", ["reset-0"]),
    (MachineState.READY, "manager", []),  # runs no phase
])
def test_the_status_counts_the_items_the_assignment_hands_out(
        state: MachineState, role: Role, names: list[str]) -> None:
    """The status (steps.current_run), the assignment and the reports an agent may send all
    take a machine's items from runs.phase_run, each with its own fingerprint."""
    m = replace(machine("m1", role, state=state), managers=("10.0.0.1",))
    counted = current_run(RUNS, m)
    assert [i.name for i, _ in counted] == names
    assert all(fingerprint == i.fingerprint() for i, fingerprint in counted)
    assert reportable_items(RUNS, m, m.managers) == {f: i for i, f in counted}
    if names:
        peers = [replace(machine("m0", "manager", state=MachineState.READY), ip="10.0.0.1")]
        handed = build_assignment(AssignmentInputs(stored(RUNS), m, peers), None)
        assert [i.fingerprint() for i in handed.items] == [f for _, f in counted]


def test_reconfigure_items_are_versioned_by_the_managers_they_are_run_for() -> None:
    m = machine("w1", state=MachineState.RECONFIGURE)
    one, two = (phase_run(RUNS, m, "reconfigure", managers) for managers in
                (["10.0.0.1"], ["10.0.0.1", "10.0.0.2"]))
    assert [i.name for i, _ in one] == [i.name for i, _ in two] == ["w-reconfigure-0"]
    assert one[0][1] != two[0][1]
    assert current_run(RUNS, replace(m, managers=("10.0.0.1",))) == one
