"""What each machine would run, shown before it runs (`coordinator cluster render`): the items
of every phase a machine may be assigned, as its assignment would list them, each templated
text filled in with the values its assignment would carry, the way its agent fills them in
(nodeagent/wire/templates.py). A secret value is never shown, only named; a value not produced yet
says so. Pure: the same spec and machines always render the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from coordinator.domain.assignments.minting import job_values
from coordinator.domain.errors import NotFound
from coordinator.domain.model import (
    DEPLOYED_STATES,
    ClusterSpec,
    Machine,
    MachineState,
    Role,
    deployed_managers,
    first_manager,
    ordered,
    same_hostname,
)
from coordinator.domain.records import ClusterOutput
from coordinator.domain.releases.releases import first_only_notes, next_upgrader
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.specs.outputs import PREFIX, available, declared, public_names
from coordinator.domain.specs.templating import template_values
from coordinator.domain.views.fleet import Fleet, fleet_job, hypothetical_fleet
from nodeagent.wire.contract import JOB_PHASES, Phase
from nodeagent.wire.protocol import Location, StateItem
from nodeagent.wire.templates import TemplateError, render
from nodeagent.wire.validation import format_path

# The phases in the order a machine's life meets them.
ORDER: tuple[Phase, ...] = ("prepare", "deploy", "postdeploy", "upgrade", "reconfigure", "remedy",
                            "leave", "reset", "mint", "revoke")
# Rendered when the cluster has no machine yet and no fleet was asked for.
SMALLEST_FLEET = Fleet(managers=1, workers=1)


@dataclass(frozen=True)
class Values:
    """The values a machine's items are filled in with: known (name: value), the names of the
    secret ones and of those not produced yet, which are shown by name, never by value."""

    known: Mapping[str, str]
    secret: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()

    def shown(self) -> dict[str, str]:
        """Each value as a rendering prints it. Not produced yet wins over secret: there is
        no value to hide, and saying so tells the operator more."""
        shown = dict(self.known)
        shown.update({name: f"[secret ${{{name}}}]" for name in self.secret})
        shown.update({name: f"<${{{name}}}: not produced yet>" for name in self.missing})
        return shown


@dataclass(frozen=True)
class RenderedItem:
    name: str
    version: str
    timeout: float
    action: dict[str, Any]  # as the spec writes it (camelCase), each templated text filled in
    problems: tuple[str, ...] = ()  # texts that cannot be filled in: the node fails the item


@dataclass(frozen=True)
class RenderedPhase:
    phase: Phase
    items: tuple[RenderedItem, ...]
    joiner: str | None = None  # a mint, revoke or leave job's: the machine it runs for


@dataclass(frozen=True)
class RenderedMachine:
    id: str
    hostname: str
    ip: str | None
    role: Role | None
    state: MachineState
    release: str
    values: dict[str, str]  # as shown: secrets masked
    phases: tuple[RenderedPhase, ...] = ()  # those with items to run


@dataclass(frozen=True)
class Rendering:
    spec: ClusterSpec
    fleet: Fleet | None  # the hypothetical fleet rendered; None: the cluster's machines
    machines: list[RenderedMachine]
    notes: tuple[str, ...] = ()  # items only one manager runs, and which (first_only_notes)


def machine_values(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine],
                   stored: ClusterSpec | None = None,
                   kept: Mapping[str, ClusterOutput] | None = None) -> Values:
    """The values machine's assignment carries, as a rendering shows them: the one place the
    names of secret values and of values not produced yet are given. What is stored decides
    what is secret, not the spec rendered, which anyone who may read can send: an output's
    value is shown only when both spec and stored (the cluster's spec as stored; None: no
    output is shown) declare it `secret: false`; join material (the machine's own, or its
    job's) never, whatever either says of its name. Outputs not produced yet are named so
    (join material is minted only when the machine joins). kept: the outputs the cluster
    keeps (StoredCluster.outputs)."""
    managers = [m for m in peers if m.role == "manager"]
    known = {**template_values(spec, machine, peers), **available(machine, managers, kept)}
    minted = set(machine.material.values) if machine.material is not None else set()
    if machine.minting is not None:
        known.update(job_values(spec, machine.minting))
        minted.update(machine.minting.values)
    public = public_names(spec) & public_names(stored) if stored is not None else frozenset()
    secret = {n for n in known if n.startswith(PREFIX) and (n not in public or n in minted)}
    missing = frozenset(declared(spec)) - set(known)
    return Values(known, frozenset(secret), missing)


def render_item(item: StateItem, shown: Mapping[str, str]) -> RenderedItem:
    """item with each text its agent fills in (_Action.templated) filled in from shown."""
    action = item.action.model_dump(mode="json", by_alias=True, exclude_none=True)
    problems = []
    for location, text in item.action.templated():
        try:
            _put(action, location, render(text, shown))
        except TemplateError as exc:
            problems.append(f"{format_path(location)}: {exc}")
    return RenderedItem(item.name, item.version, item.timeout, action, tuple(problems))


def _put(document: Any, location: Location, text: str) -> None:
    """Replace what is at location (keys and list indexes) in document with text."""
    *parents, last = location
    for key in parents:
        document = document[key]
    document[last] = text


def shown_items(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine],
                phase: Phase) -> list[StateItem]:
    """The items of phase the machine would be assigned (runs.phase_run): the
    post-deploy step only on the first manager, an upgrade only on a deployed machine, the
    first upgrader's items only on the manager that upgrades first (releases.next_upgrader)."""
    if phase == "postdeploy":
        first = first_manager(peers)
        if first is None or first.id != machine.id:
            return []
    if phase == "upgrade" and machine.state not in DEPLOYED_STATES:
        return []
    if phase == "upgrade" and machine.role == "manager":
        upgrader = next_upgrader(spec, peers)
        machine = replace(machine, first_upgrader=upgrader is not None and upgrader.id == machine.id)
    return [i for i, _ in phase_run(spec, machine, phase, deployed_managers(peers))]


def render_machine(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine],
                   phases: Sequence[Phase] = ORDER,
                   stored: ClusterSpec | None = None,
                   kept: Mapping[str, ClusterOutput] | None = None) -> RenderedMachine:
    """machine's items of phases, rendered; peers are its cluster's machines (the managers
    among them are all its values depend on, with kept, the outputs the cluster keeps);
    stored decides which values are secret (machine_values)."""
    shown = machine_values(spec, machine, peers, stored, kept).shown()
    job = machine.minting
    rendered = tuple(RenderedPhase(phase, tuple(render_item(i, shown) for i in items),
                                   job.hostname if job and phase in JOB_PHASES else None)
                     for phase in phases if (items := shown_items(spec, machine, peers, phase)))
    return RenderedMachine(machine.id, machine.hostname, machine.ip, machine.role,
                           machine.state, machine.release, shown, rendered)


def render_cluster(spec: ClusterSpec, machines: Sequence[Machine], fleet: Fleet | None = None,
                   machine: str | None = None, phase: Phase | None = None,
                   stored: ClusterSpec | None = None,
                   kept: Mapping[str, ClusterOutput] | None = None) -> Rendering:
    """spec rendered on machines, or on a hypothetical fleet (asked for, or the smallest when
    there is no machine); only the machine named (id or hostname) and the phase, if given;
    stored, the cluster's spec as stored, decides which values are secret (machine_values);
    kept, the outputs the cluster keeps (none for a hypothetical fleet)."""
    if fleet is None and not machines:
        fleet = SMALLEST_FLEET
    if fleet is not None:
        machines = hypothetical_fleet(spec, fleet)
    managers = [m for m in machines if m.role == "manager"]  # what every value depends on
    chosen = ordered(machines) if machine is None else [_named(spec, machines, machine, fleet)]
    phases = ORDER if phase is None else (phase,)
    kept = None if fleet is not None else kept
    rendered = [render_machine(spec, m, managers, phases, stored, kept) for m in chosen]
    if fleet is not None:  # its managers run no job: each is shown the one it may be given
        rendered = [replace(r, phases=r.phases + tuple(
            p for kind in ("mint", "revoke") if kind in phases
            and (job := fleet_job(spec, machines, m, kind)) is not None
            for p in render_machine(spec, replace(m, minting=job), managers, (kind,),
                                    stored).phases)) for m, r in zip(chosen, rendered, strict=True)]
    return Rendering(spec, fleet, rendered, tuple(first_only_notes(spec, managers)))


def _named(spec: ClusterSpec, machines: Sequence[Machine], ref: str,
           fleet: Fleet | None) -> Machine:
    found = next((m for m in machines if ref == m.id or same_hostname(ref, m.hostname)), None)
    if found is not None:
        return found
    if fleet is None:
        raise NotFound(f"no machine with id or hostname {ref} in cluster {spec.name}")
    raise NotFound(f"no machine {ref} in the hypothetical fleet ({fleet.hostnames()})")

