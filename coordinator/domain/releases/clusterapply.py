"""What `cluster apply` (and `upgrade pause|resume`) changes, decided whole from the cluster as
stored and its machines: the cluster written with its new generation, every machine's
generation bumped so its agent fetches its assignment again, the events, and whom to wake; or
nothing at all when the spec is the one stored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from coordinator.domain.changes import Change, bumped
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.model import (
    NO_ACCESS_DRAINS_SKIPPED,
    ClusterSpec,
    Machine,
    MachineState,
    drains_skipped,
)
from coordinator.domain.records import Event, StoredCluster
from coordinator.domain.releases import versions
from coordinator.domain.specs.specs import check_fixed, pause_kept, provision_kept


@dataclass(frozen=True)
class Applying:
    """The cluster as it is once the change is written, whether that changed it, the
    change, and what the operator is warned of (versions.warnings)."""

    stored: StoredCluster
    changed: bool
    change: Change
    warnings: tuple[str, ...] = ()


def respecified(stored: StoredCluster, spec: ClusterSpec, now: float) -> StoredCluster | None:
    """The cluster once spec replaces its own; None when that changes nothing. Compared as
    the JSON both are stored as: a spec stored by an older model version (missing a field
    that now has a default) is not a change."""
    if stored.spec.model_dump(mode="json", by_alias=True) == spec.model_dump(mode="json",
                                                                           by_alias=True):
        return None
    return replace(stored, spec=spec, generation=stored.generation + 1, updated_at=now)


def applying(before: StoredCluster | None, spec: ClusterSpec, machines: Sequence[Machine],
             now: float, allow_downgrade: bool = False) -> Applying:
    """spec applied over before (None: a new cluster), whose machines are machines: the
    stored pause and hold kept unless spec says them (specs.pause_kept, provision_kept), the
    fixed fields held
    (Conflict), the Kubernetes version admitted (versions.admitted: InvalidDocument). A
    reconcile pass is asked for whatever changed."""
    if before is not None and before.deleting:
        raise Conflict(f"cluster {spec.name} is being deleted")
    spec = provision_kept(before and before.spec, pause_kept(before and before.spec, spec))
    if before is not None:
        check_fixed(before.spec, spec, machines)
    spec, verdict = versions.admitted(before and before.spec, spec, machines, allow_downgrade)
    stored = (StoredCluster(spec=spec, generation=1, created_at=now, updated_at=now)
              if before is None else respecified(before, spec, now))
    if stored is None:
        assert before is not None
        return Applying(before, False, Change(kick=True))
    events = [event(now, spec.name, "cluster-applied",
                    f"cluster {'created' if before is None else 'updated'}: release "
                    f"{spec.release}, generation {stored.generation}",
                    data={"release": spec.release, "generation": stored.generation})]
    if verdict.downgrade and before is not None:
        events.append(event(now, spec.name, "downgrade",
                            versions.downgrade_text(before.spec, spec),
                            data={"from": before.spec.settings.kubernetes.version,
                                  "to": spec.settings.kubernetes.version}))
    again = bumped(machines)
    upgrades = before is not None and before.spec.release != spec.release and bool(machines)
    skipped = [NO_ACCESS_DRAINS_SKIPPED] if upgrades and drains_skipped(spec) else []
    return Applying(stored, True, Change(machines=again, events=events, clusters=[stored],
                                         wake=[m.id for m in again], kick=True),
                    (*versions.warnings(before and before.spec, spec, verdict), *skipped))


def paused_spec(spec: ClusterSpec, paused: bool) -> ClusterSpec:
    """spec with upgrades paused or resumed (settings.upgrade.paused)."""
    settings = spec.settings.model_copy(update={
        "upgrade": spec.settings.upgrade.model_copy(update={"paused": paused})})
    return spec.model_copy(update={"settings": settings})


def pausing(stored: StoredCluster, paused: bool, machines: Sequence[Machine],
            now: float) -> Applying:
    """`upgrade pause|resume`: the stored spec applied with the pause set, and an event saying
    so when that changed it."""
    applied = applying(stored, paused_spec(stored.spec, paused), machines, now)
    if not applied.changed:
        return applied
    said: Event = event(now, stored.spec.name, "upgrade", "upgrade " + (
        "paused: no machine starts upgrading" if paused else "resumed"))
    return replace(applied, change=replace(applied.change,
                                           events=[*applied.change.events, said]))


def provisioning(stored: StoredCluster, machines: Sequence[Machine], now: float) -> Applying:
    """`cluster provision`: the stored spec applied with its hold released (settings.provision.
    held), so its approved and claimed machines start; with an event saying how many. A
    cluster not held is left as it is (changed: False)."""
    if not stored.spec.settings.provision.held:
        return Applying(stored, False, Change())
    settings = stored.spec.settings
    spec = stored.spec.model_copy(update={"settings": settings.model_copy(update={
        "provision": settings.provision.model_copy(update={"held": False})})})
    applied = applying(stored, spec, machines, now)
    waiting = sum(m.state is MachineState.PENDING and m.approved and m.role is not None
                  for m in machines)
    said: Event = event(now, stored.spec.name, "provisioned", f"cluster provisioned: "
                        f"{waiting} approved machine{'s' if waiting != 1 else ''} start",
                        data={"machines": waiting})
    return replace(applied, change=replace(applied.change,
                                           events=[*applied.change.events, said]))
