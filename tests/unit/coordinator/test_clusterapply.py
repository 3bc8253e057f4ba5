"""`cluster apply` and `upgrade pause|resume` decided whole (domain/releases/clusterapply.py): from the
cluster as stored and its machines, the one change written in one transaction (the cluster,
every machine's new generation, the events) and whom it wakes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.records import StoredCluster
from coordinator.domain.releases.clusterapply import applying, pausing
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import cluster, item, machine

NOW = 500.0


def spec(version: str, release: str) -> ClusterSpec:
    return cluster([item("packages", "prepare")], [item("packages", "prepare")],
                   release=release, kubernetes={"version": version})


def stored(version: str, release: str, generation: int = 3, deleting: bool = False,
           paused: bool = False) -> StoredCluster:
    said = spec(version, release)
    if paused:
        said = said.model_copy(update={"settings": said.settings.model_copy(update={
            "upgrade": said.settings.upgrade.model_copy(update={"paused": True})})})
    return StoredCluster(said, generation, 1.0, 2.0, deleting)


def deployed(hostname: str, version: str, role: str = "worker") -> Machine:
    return replace(machine(hostname, role, state=MachineState.READY),  # type: ignore[arg-type]
                   kubernetes=version, generation=7)


FLEET = [deployed("m1", "1.34.1", "manager"), deployed("w1", "1.34.1")]


@pytest.mark.parametrize(("before", "applied", "machines", "force", "generation", "events"), [
    # a new cluster: stored at generation 1, told by one event
    (None, spec("1.34.1", "r1"), [], False, 1,
     [("cluster-applied", "cluster created: release r1, generation 1")]),
    # a new release: the next generation, every machine's assignment made again
    (stored("1.34.1", "r1"), spec("1.34.1", "r2"), FLEET, False, 4,
     [("cluster-applied", "cluster updated: release r2, generation 4")]),
    # a forced downgrade is recorded as one
    (stored("1.34.1", "r1"), spec("1.34.0", "r2"), FLEET, True, 4,
     [("cluster-applied", "cluster updated: release r2, generation 4"),
      ("downgrade", "Kubernetes 1.34.1 -> 1.34.0 at release r2: a downgrade, forced "
                    "(--allow-downgrade); the package items may install older packages")]),
])
def test_a_changed_spec_is_one_change_of_the_cluster_its_machines_and_its_events(
        before: StoredCluster | None, applied: ClusterSpec, machines: list[Machine],
        force: bool, generation: int, events: list[tuple[str, str]]) -> None:
    result = applying(before, applied, machines, NOW, force)
    change = result.change
    assert result.changed and result.stored.generation == generation
    assert change.clusters == [result.stored]
    assert result.stored.spec.release == applied.release
    assert result.stored.updated_at == NOW
    assert [(m.id, m.generation) for m in change.machines] == [(m.id, 8) for m in machines]
    assert [(e.kind, e.message) for e in change.events] == events
    assert all(e.time == NOW and e.cluster == "edge" for e in change.events)
    assert list(change.wake) == [m.id for m in machines] and change.kick
    assert not change.removed and change.retarget is None


def test_the_spec_stored_already_writes_nothing_and_still_asks_for_a_pass() -> None:
    before = stored("1.34.1", "r1")
    result = applying(before, spec("1.34.1", "r1"), FLEET, NOW)
    assert not result.changed and result.stored is before
    assert not result.change.writes and result.change.kick and not result.change.wake


@pytest.mark.parametrize(("before", "applied", "refused"), [
    (stored("1.34.1", "r1", deleting=True), spec("1.34.1", "r2"), Conflict),
    (stored("1.33.4", "r1"), spec("1.35.0", "r2"), InvalidDocument),  # two minors at once
    (stored("1.34.1", "r1"), spec("1.34.0", "r2"), InvalidDocument),  # a downgrade, unforced
])
def test_a_refused_apply_decides_no_change(before: StoredCluster, applied: ClusterSpec,
                                           refused: type[Exception]) -> None:
    with pytest.raises(refused):
        applying(before, applied, [deployed("w1", before.spec.settings.kubernetes.version
                                            or "")], NOW)


@pytest.mark.parametrize(("paused_before", "paused", "events"), [
    (False, True, ["cluster-applied", "upgrade"]),
    (True, False, ["cluster-applied", "upgrade"]),
    (True, True, []),  # nothing to change: nothing written, nothing said
    (False, False, []),
])
def test_pausing_is_one_apply_with_its_event(paused_before: bool, paused: bool,
                                             events: list[str]) -> None:
    before = stored("1.34.1", "r1", paused=paused_before)
    result = pausing(before, paused, FLEET, NOW)
    assert [e.kind for e in result.change.events] == events
    assert result.stored.spec.settings.upgrade.paused is paused
    assert result.changed is bool(events)
    if events:
        assert result.change.events[-1].message == "upgrade " + (
            "paused: no machine starts upgrading" if paused else "resumed")
