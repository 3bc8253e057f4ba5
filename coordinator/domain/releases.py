"""What a spec asks of a deployed machine. An upgrade is applying the spec's set of items: a
machine runs its role's prepare and deploy items that are new or changed since it ran them,
then, when it is at an earlier release, the upgrade items it has not applied. A machine that
deployed (or upgraded) at a release takes that release's upgrade items as applied, its
baseline: they lead where its deploy items already brought it, so it never runs them.
docs/coordinator.md (Upgrades) tells the rules as an operator sees them.
"""

from __future__ import annotations

from coordinator.domain.catalog import Entry, catalog
from coordinator.domain.model import ClusterSpec, Machine, Role
from nodeagent.contract import Phase

# The phases whose items an upgrade runs again when they change, in the order it runs them.
_RERUN: tuple[Phase, ...] = ("prepare", "deploy")


def upgrade_run(spec: ClusterSpec, machine: Machine) -> list[Entry]:
    """The items an Upgrade of the machine runs, in order: new or changed prepare and deploy
    items, then the upgrade items it has not applied when it is not at the spec's release.
    In Upgrade, the items it was admitted to run stay listed once applied, so the list is the
    same throughout: for its agent, which goes on with the phase it started, and for the
    status, which counts them."""
    if machine.role is None:
        return []
    phases: tuple[Phase, ...] = (*_RERUN, "upgrade") if machine.release != spec.release else _RERUN
    book = catalog(spec)
    return [(item, fingerprint) for phase in phases
            for item, fingerprint in book.of(machine, phase)
            if fingerprint not in machine.applied or fingerprint in machine.upgrading]


def to_run(spec: ClusterSpec, machine: Machine) -> list[Entry]:
    """What the machine's upgrade has yet to apply: nothing when it is up to date."""
    return [(i, f) for i, f in upgrade_run(spec, machine) if f not in machine.applied]


def baseline(spec: ClusterSpec, role: Role) -> frozenset[str]:
    """The fingerprints of the role's upgrade items: a machine that reaches the spec's release
    takes them as applied (they are written for machines at earlier releases)."""
    return frozenset(f for _, f in catalog(spec).items(role, "upgrade"))


def at_release(spec: ClusterSpec, machine: Machine) -> bool:
    """Recorded at the spec's release, with every upgrade item of it applied or as baseline."""
    return machine.release == spec.release and (
        machine.role is None or baseline(spec, machine.role) <= machine.applied)


def names(entries: list[Entry]) -> str:
    """Items as the operator reads them in events and plans: phase/name, in run order."""
    return ", ".join(f"{item.phase}/{item.name}" for item, _ in entries)
