"""`machines delete` and `cluster delete` decided whole (domain/machines/deletion.py): each machine
state in, the one change out (the record removed or the machine Deleting with its drain, the
event, whom it wakes); a cluster's deletion is its mark and all its machines in one change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.machines.deletion import cluster_deletion, removal
from coordinator.domain.model import DrainStage, Machine, MachineState
from coordinator.domain.records import StoredCluster
from tests.support.builders import cluster, items, machine

S = MachineState
NOW = 50.0
UNREACHABLE = cluster(worker=items("reset", 1))
KUBE = cluster(worker=items("reset", 1), kubernetes={"kubeconfig": "/etc/k.conf"})


def w1(state: MachineState, role: str | None = "worker") -> Machine:
    return replace(machine("w1", role, state=state), generation=4)  # type: ignore[arg-type]


@pytest.mark.parametrize(("leaving", "spec", "skip_reset", "message", "drain"), [
    # never ran items: its record goes at once
    (w1(S.PENDING), KUBE, False, "w1 removed", "removed"),
    (w1(S.PENDING, role=None), KUBE, False, "w1 removed", "removed"),
    (w1(S.READY), KUBE, True, "w1 removed without reset (skipped)", "removed"),
    (w1(S.DELETING), KUBE, True, "w1 removed without reset (skipped)", "removed"),
    # deployed: Deleting, its node drained first when the cluster can be reached
    (w1(S.READY), KUBE, False, "w1 Ready -> Deleting: drain, reset items, Node deletion",
     DrainStage.DRAINING),
    # a deployed node the coordinator cannot reach is not drained, and the event says so
    (w1(S.READY), UNREACHABLE, False, "w1 Ready -> Deleting: running reset items; its node is "
     "not drained first, no kubeconfig: settings.kubernetes.kubeconfig is not set and no "
     "manager reported one (kubeconfigFrom on a manager item)", None),
    (w1(S.PREPARE), UNREACHABLE, False, "w1 Prepare -> Deleting: running reset items", None),
])
def test_each_machine_state_leaves_in_one_change(leaving: Machine, spec: object,
                                                 skip_reset: bool, message: str,
                                                 drain: object) -> None:
    change = removal(leaving, [leaving], spec, NOW, skip_reset=skip_reset)  # type: ignore[arg-type]
    assert change is not None
    assert [(e.kind, e.message, e.machine) for e in change.events] == [
        ("removed" if drain == "removed" else "state", message, leaving.id)]
    assert list(change.wake) == [leaving.id]
    if drain == "removed":
        assert change.removed == {leaving.id: NOW} and not change.machines
        assert not change.kick
    else:
        (updated,) = change.machines
        assert updated.state is S.DELETING and updated.state_since == NOW
        assert updated.generation == 5 and not change.removed and change.kick
        assert (updated.drain and updated.drain.stage) == drain
        assert change.events[0].data == {"from": leaving.state.value, "to": "Deleting",
                                         "forced": False}


def test_a_machine_already_leaving_changes_nothing() -> None:
    assert removal(w1(S.DELETING), [w1(S.DELETING)], KUBE, NOW) is None


def test_a_manager_the_quorum_needs_is_refused_unless_forced() -> None:
    managers = [replace(machine(f"m{i}", "manager", state=S.READY), id=f"m{i}")
                for i in (1, 2)]
    with pytest.raises(Conflict, match="fewer than a majority"):
        removal(managers[1], managers, UNREACHABLE, NOW)
    change = removal(managers[1], managers, UNREACHABLE, NOW, force=True)
    assert change is not None
    assert "(forced, though deleting m2 would leave 1 of the 2" in change.events[0].message
    assert change.events[0].data["forced"] is True


def test_a_cluster_leaves_whole_in_one_change_nothing_drained_nor_guarded() -> None:
    stored = StoredCluster(KUBE, 3, 1.0, 2.0)
    fleet = [replace(machine("m1", "manager", state=S.READY), id="m1"),
             replace(machine("w1", state=S.PENDING), id="w1"),
             replace(machine("w2", state=S.DELETING), id="w2"),
             replace(machine("w3", state=S.READY), id="w3")]
    change = cluster_deletion(stored, fleet, NOW)
    assert change.clusters == [replace(stored, deleting=True)]
    assert change.removed == {"w1": NOW}
    assert [(m.id, m.state, m.drain) for m in change.machines] == [
        ("m1", S.DELETING, None), ("w3", S.DELETING, None)]  # the last manager too: no guard
    assert [e.message for e in change.events] == [
        "m1 Ready -> Deleting: running reset items", "w1 removed",
        "w3 Ready -> Deleting: running reset items"]
    assert list(change.wake) == ["m1", "w1", "w3"] and change.kick


def test_an_empty_cluster_is_only_marked() -> None:
    stored = StoredCluster(KUBE, 3, 1.0, 2.0)
    change = cluster_deletion(stored, [], NOW)
    assert change.clusters == [replace(stored, deleting=True)] and not change.events
    assert change.kick and change.writes
