"""Assignments and template values, without a store."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.assignment import AssignmentInputs, build_assignment
from coordinator.domain.model import ClusterSpec, DrainStage, MachineState
from coordinator.domain.records import StoredCluster
from coordinator.domain.templating import template_values
from tests.support.builders import cluster, drained, items, machine, upgraded_cluster


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
    spec = upgraded_cluster(cluster(worker=items("deploy", 1)))
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


def test_template_values_list_managers_in_registration_order_and_the_deployed_first() -> None:
    spec = cluster()
    m1 = replace(machine("m1", "manager", state=MachineState.PREPARE, created_at=1.0), ip="10.0.0.1")
    m2 = replace(machine("m2", "manager", state=MachineState.READY, created_at=2.0), ip="10.0.0.2")
    gone = machine("m3", "manager", state=MachineState.DELETING, created_at=3.0)
    values = template_values(spec, m1, [gone, m2, m1])
    assert values["managers"] == "10.0.0.1,10.0.0.2"
    assert values["managers.hostnames"] == "m1,m2"
    assert values["managers.first"] == "10.0.0.2"
