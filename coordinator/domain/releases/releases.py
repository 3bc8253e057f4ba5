"""What a spec asks of a deployed machine. An upgrade is applying the spec's set of items: a
machine runs its role's prepare and deploy items that are new or changed since it ran them,
then, when it is at an earlier release, the upgrade items it has not applied. A machine that
deployed (or upgraded) at a release takes that release's upgrade items as applied, its
baseline: they lead where its deploy items already brought it, so it never runs them.
docs/coordinator.md (Upgrades) tells the rules as an operator sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coordinator.domain.model import (
    DEPLOYED_STATES,
    ClusterSpec,
    Machine,
    MachineState,
    Role,
    admission_order,
    is_first_manager,
)
from coordinator.domain.specs.catalog import Entry, catalog
from nodeagent.wire.contract import Phase

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


def behind(spec: ClusterSpec, machine: Machine) -> bool:
    """A deployed machine with items to run: new or changed prepare or deploy items, or the
    upgrade items of a later release than its own."""
    return machine.state in DEPLOYED_STATES and bool(to_run(spec, machine))


def awaiting_upgrade(spec: ClusterSpec, machine: Machine) -> bool:
    """A Ready machine the planner would admit into Upgrade (but for a pause or its limits):
    what the status and its note say it waits for."""
    return machine.state is MachineState.READY and behind(spec, machine)


def baseline(spec: ClusterSpec, role: Role, control_plane_there: bool = False) -> frozenset[str]:
    """The fingerprints of the role's upgrade items: a machine that reaches the spec's release
    takes them as applied (they are written for machines at earlier releases). The first
    upgrader's only with control_plane_there (joins_upgraded): a manager that joined at the
    release while the control plane was still at an earlier one is never taken for the
    control plane's upgrade (control_plane_upgraded), and one that found it there never runs
    `upgrade apply` again at a later release that did not change it (a certificate renewal)."""
    return frozenset(f for item, f in catalog(spec).items(role, "upgrade")
                     if control_plane_there or item.when is None or not item.when.first_upgrader)


def reached_baseline(spec: ClusterSpec, machine: Machine,
                     machines: Iterable[Machine]) -> frozenset[str]:
    """The baseline a deployed machine (role set) takes on reaching spec's release."""
    assert machine.role is not None
    return baseline(spec, machine.role,
                    joins_upgraded(spec, is_first_manager(machine), machines))


def joins_upgraded(spec: ClusterSpec, first: bool, machines: Iterable[Machine]) -> bool:
    """Whether a machine deploying at spec's release finds the control plane there: the first
    manager starts it there (init, at the spec's version), any other once a manager has the
    first upgrader's items of the release (as its baseline, or run)."""
    return first or control_plane_upgraded(spec, machines)


def at_release(spec: ClusterSpec, machine: Machine) -> bool:
    """Recorded at the spec's release, with every upgrade item of it applied or as baseline."""
    return machine.release == spec.release and (
        machine.role is None or baseline(spec, machine.role) <= machine.applied)


def first_upgrader_items(spec: ClusterSpec) -> frozenset[str]:
    """The fingerprints of the manager upgrade items only the first upgrader of a release runs
    (`when: {firstUpgrader: true}`: the control plane's `kubeadm upgrade apply`)."""
    return frozenset(f for item, f in catalog(spec).items("manager", "upgrade")
                     if item.when is not None and item.when.first_upgrader)


def control_plane_upgraded(spec: ClusterSpec, managers: Iterable[Machine]) -> bool:
    """Whether one of managers ran the first upgrader's items of spec's release (they are
    never a baseline): the control plane is at the release, and every other manager runs the
    items for the rest (`kubeadm upgrade node`)."""
    wanted = first_upgrader_items(spec)
    return bool(wanted) and any(
        m.role == "manager" and m.state is not MachineState.DELETING and wanted <= m.applied
        for m in managers)


def first_upgrader(spec: ClusterSpec, machine: Machine, machines: Iterable[Machine]) -> bool:
    """Whether a manager admitted into Upgrade now is the first of spec's release: no other
    manager has its first-upgrader items yet, whichever manager deployed first (it may have
    been deleted). The planner admits managers one at a time and records this at admission
    (Machine.first_upgrader), so it holds while that manager upgrades; a first upgrader
    deleted before it finished leaves the role to the next manager admitted."""
    return (machine.role == "manager" and bool(first_upgrader_items(spec))
            and not control_plane_upgraded(spec, (m for m in machines if m.id != machine.id)))


def next_upgrader(spec: ClusterSpec, machines: Sequence[Machine]) -> Machine | None:
    """The manager that runs (or would run) the first upgrader's items of spec's release: the
    one in Upgrade recorded so, else, while no manager has them, the first deployed manager
    that answers, in admission order, as the planner admits them (None: the control plane is
    at the release already, or no manager can)."""
    upgrading = next((m for m in machines if m.first_upgrader), None)
    if upgrading is not None or control_plane_upgraded(spec, machines) \
            or not first_upgrader_items(spec):
        return upgrading
    return min((m for m in machines if m.role == "manager" and m.responding
                and m.state in DEPLOYED_STATES), key=admission_order, default=None)


def first_only_notes(spec: ClusterSpec, machines: Sequence[Machine]) -> list[str]:
    """Which items only one manager runs, and which one, as `cluster render` and `upgrade
    plan` say: the first manager's (`firstManager: true`) and the first upgrader's of a
    release (`firstUpgrader: true`)."""
    notes = []
    by_first = [f"{i.phase}/{i.name}" for i in spec.machine_types.manager
                if i.when is not None and i.when.first_manager]
    if by_first:
        managers = [m for m in machines if m.role == "manager"]
        first = next((m for m in managers if is_first_manager(m)), None)
        where = (first.hostname if first is not None
                 else "deleted" if any(m.deploy_order for m in managers)
                 else "the first to finish Prepare")
        notes.append(f"only the first manager ({where}) runs {', '.join(by_first)}: once it is "
                     "deleted nobody runs them again")
    by_upgrader = [f"{i.phase}/{i.name}" for i in spec.machine_types.manager
                   if i.when is not None and i.when.first_upgrader]
    if by_upgrader:
        upgrader = next_upgrader(spec, machines)
        where = (upgrader.hostname if upgrader is not None
                 else "none: the control plane is at this release" if control_plane_upgraded(
                     spec, machines) else "none answers now")
        notes.append(f"only the manager that upgrades first in release {spec.release} runs "
                     f"{', '.join(by_upgrader)} (now: {where}); the other managers run the "
                     "items `firstUpgrader: false`")
    return notes


def names(entries: list[Entry]) -> str:
    """Items as the operator reads them in events and plans: phase/name, in run order."""
    return ", ".join(f"{item.phase}/{item.name}" for item, _ in entries)
