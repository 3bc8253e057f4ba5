"""The reconcile pass decided whole (domain/reconcile/reconciling.py): what a pass over one cluster
writes, removes and wakes, from the machines it loaded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import Machine, MachineState
from coordinator.domain.reconcile.reconciling import checked_responding, decide_pass
from coordinator.domain.records import StoredCluster
from tests.support.builders import at_release, cluster, finish_phase, items, machine

S = MachineState
SPEC = cluster(manager=items("prepare", 1), worker=items("prepare", 1))
IDLE = cluster()  # no items: a Ready machine has nothing left to do
NOW = 1000.0


def stored(spec: object = SPEC, deleting: bool = False) -> StoredCluster:
    return StoredCluster(spec, 1, 0.0, 0.0, deleting=deleting)  # type: ignore[arg-type]


def leaving() -> Machine:
    return finish_phase(SPEC, machine("w1", state=S.DELETING))


@pytest.mark.parametrize(("cluster_", "machines", "written", "kinds", "removed", "emptied"), [
    (stored(), [machine("w1")], ["w1"], ["state"], [], False),
    (stored(), [finish_phase(SPEC, machine("m1", "manager", state=S.PREPARE))], ["m1"],
     ["state", "state"],
     [], False),
    (stored(IDLE), [at_release(IDLE, machine("w1", state=S.READY))], [], [], [], False),
    (stored(), [machine("w1", approved=False)], [], [], [], False),
    (stored(), [leaving()], [], ["state"], ["w1"], False),
    (stored(deleting=True), [leaving()], [], ["state", "cluster-removed"], ["w1"], True),
], ids=["approved-starts-prepare", "prepared-manager-deploys", "settled-writes-nothing",
        "unapproved-waits", "reset-removes", "last-of-a-deleted-cluster"])
def test_a_pass_decides_what_it_writes_removes_and_wakes(
        cluster_: StoredCluster, machines: list[Machine], written: list[str], kinds: list[str],
        removed: list[str], emptied: bool) -> None:
    decided = decide_pass(cluster_, machines, NOW)
    change = decided.change
    assert [m.hostname for m in change.machines] == written
    assert [e.kind for e in change.events] == kinds
    assert sorted(change.removed) == [f"id-{h}" for h in removed]
    assert set(change.removed.values()) <= {NOW}
    assert change.wake == [*(m.id for m in change.machines), *change.removed]
    assert change.writes == bool(written or kinds or removed)
    assert decided.cluster_emptied is emptied
    assert list(change.dropped) == ([cluster_.spec.name] if emptied else [])
    assert [m.id for m in decided.current] == [m.id for m in machines if m.hostname not in removed]


def test_what_the_load_found_comes_first_and_is_written_with_the_rest() -> None:
    silent, checked = checked_responding(SPEC, [machine("w1"), machine("w2", approved=False)],
                                         {"id-w1": 0.0, "id-w2": 0.0}, NOW, listening_since=0.0)
    decided = decide_pass(stored(), silent, NOW, checked)
    assert [e.kind for e in decided.change.events] == ["not-responding", "not-responding",
                                                       "state"]
    changed = {m.id: m for m in decided.change.machines}
    assert changed["id-w1"].state is S.PREPARE
    assert sorted(changed) == ["id-w1", "id-w2"]
    assert not any(m.responding for m in decided.change.machines)
    assert [e.kind for e in checked.events] == ["not-responding", "not-responding"], \
        "the decision changed what the load handed it"


@pytest.mark.parametrize(("was", "heard", "listening_since", "now_responding", "kind"), [
    (True, NOW - 5, 0.0, True, None),
    (True, NOW - 500, 0.0, False, "not-responding"),
    (False, NOW - 5, 0.0, True, "responding"),
    (True, NOW - 500, NOW - 10, True, None),  # just took over: no one silent for a timeout
    (False, NOW - 500, NOW - 10, False, None),  # silent before the restart stays silent
], ids=["heard", "went-silent", "answers-again", "leader-just-started", "still-silent"])
def test_a_machine_s_heartbeats_say_whether_it_responds(
        was: bool, heard: float, listening_since: float, now_responding: bool,
        kind: str | None) -> None:
    m = replace(machine("w1"), responding=was)
    [checked], out = checked_responding(SPEC, [m], {m.id: heard}, NOW, listening_since)
    assert checked.responding is now_responding
    assert [e.kind for e in out.events] == ([kind] if kind else [])
    assert [m.id for m in out.machines] == (["id-w1"] if kind else [])
