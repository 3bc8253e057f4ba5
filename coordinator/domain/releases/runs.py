"""The items a machine runs in a phase, chosen in one place so that what its assignment
carries, what `cluster render` shows, what a report may name and what the rollout status
counts agree (assignment.py, rendering.py, reports.py and steps.py all take them from here)."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.model import ClusterSpec, Machine, MintJob, machine_items, remedy_items
from coordinator.domain.releases.releases import upgrade_run
from coordinator.domain.specs.catalog import Entry, catalog
from nodeagent.wire.contract import JOB_PHASES, Phase
from nodeagent.wire.protocol import StateItem

# The phases whose items model.phase_items derives from the spec's (versioned by the managers
# or followed by a version check), which the catalog does not hold.
_VERSIONED: frozenset[Phase] = frozenset({"reconfigure", "postdeploy"})


def phase_run(spec: ClusterSpec, machine: Machine, phase: Phase,
              managers: Sequence[str]) -> list[Entry]:
    """The items machine runs in phase, with their fingerprints. managers: the manager list
    reconfigure items are versioned by (model.phase_items). An upgrade runs what changed since
    the machine last ran (releases.upgrade_run), not only upgrade items; a mint or revoke
    phase, the manager's job (job_items); any other, the items whose `when` holds for it."""
    if machine.role is None:
        return []
    if phase in JOB_PHASES:
        jobs = job_items(spec, machine.minting) if machine.minting is not None else []
        return [(i, i.fingerprint()) for i in jobs]
    if phase == "remedy":
        return [(i, i.fingerprint()) for i in remedy_items(spec, machine)]
    if phase == "upgrade":
        return upgrade_run(spec, machine)
    if phase in _VERSIONED:
        return [(i, i.fingerprint()) for i in machine_items(spec, machine, phase, managers)]
    return catalog(spec).of(machine, phase)


def job_items(spec: ClusterSpec, job: MintJob) -> list[StateItem]:
    """The items a manager runs for its job, versioned by the machine and the minting they are
    for: each job's run is its own item, so that its report names the job it belongs to."""
    return [i.model_copy(update={"version": f"{i.version}+{job.kind}.{job.joiner}.{job.serial}"})
            for i in spec.items("manager", job.kind) if i.name in job.items]
