"""Values items produce for later items, ${outputs.ITEM.NAME}: which item declares each, which
items use which, what a machine's assignment may carry and what it still waits for.

Two kinds, by the producing item's phase. A manager item of any phase but mint produces
cluster outputs: each manager keeps what its own items produced (Machine.outputs), and the
cluster keeps each value for good (StoredCluster.outputs): the first one a manager produced,
adopted by the reconcile pass (adopted), so it outlives that manager's deletion. Until it is
adopted, the first manager in admission order that produced it gives the value. A value a
manager produces that differs from the cluster's never replaces it: an event says so, and the
machine's note (differing). A mint item produces join material: run by a Ready manager for
one machine at a time, kept on that machine (Machine.material, minting.py), handed to it alone.

A machine gets an output's value only when an item it runs now uses it; an item whose values
are not there yet is not handed out, nor any after it (items run in order): the machine waits,
and the status says for what (waits_text).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.domain.model import ClusterSpec, Machine, MachineState, admission_order
from coordinator.domain.records import ClusterOutput
from nodeagent.wire.contract import JOB_PHASES
from nodeagent.wire.protocol import ItemOutput, Location, StateItem
from nodeagent.wire.templates import TemplateError, placeholders

PREFIX = "outputs."
# The phases in which a machine is given join material: those that join it to the cluster.
JOINING_PHASES = ("deploy", "upgrade")
# What mint, revoke and leave items know of the machine they run for (minting.job_values).
JOB_VALUES = ("joiner.id", "joiner.hostname", "joiner.ip", "joiner.role",
              "mint.lifetimeSeconds")


@dataclass(frozen=True)
class Declared:
    """An output as the spec declares it: the item producing it, and how."""

    item: StateItem
    output: ItemOutput

    @property
    def minted(self) -> bool:
        return self.item.phase == "mint"


def key(item: str, output: str) -> str:
    """The template name of an item's output: outputs.ITEM.NAME."""
    return f"{PREFIX}{item}.{output}"


def declared(spec: ClusterSpec) -> dict[str, Declared]:
    """Every output the spec's manager items declare, by template name. Should two items of
    one name declare outputs, the later wins here; specs with that are refused (problems)."""
    return {key(item.name, output.name): Declared(item, output)
            for item in spec.machine_types.manager for output in item.outputs}


def references(item: StateItem) -> list[str]:
    """The outputs the item's templates name, in order, once each (a malformed placeholder
    names none: the spec's checks report it)."""
    found: list[str] = []
    for _, text in item.action.templated():
        found += [n for n in _outputs_named(text) if n not in found]
    return found


@functools.lru_cache(maxsize=4096)
def _outputs_named(text: str) -> tuple[str, ...]:
    """The outputs a text names: parsed once per text, as every reconcile pass asks for each
    machine's items (a malformed placeholder names none: the spec's checks report it)."""
    try:
        return tuple(n for n in placeholders(text) if n.startswith(PREFIX))
    except TemplateError:
        return ()


def minted_references(spec: ClusterSpec, items: Iterable[StateItem]) -> list[str]:
    """The mint items whose outputs the items use, by name, in spec order."""
    outputs = declared(spec)
    used = {outputs[n].item.name for i in items for n in references(i)
            if n in outputs and outputs[n].minted}
    return [i.name for i in spec.items("manager", "mint") if i.name in used]


def cluster_outputs(managers: Iterable[Machine],
                    kept: Mapping[str, ClusterOutput] | None = None) -> dict[str, str]:
    """The cluster's outputs, by template name: those the cluster keeps (kept), then each
    other from the first manager, in admission order, that produced it."""
    found = {PREFIX + name: output.value for name, output in (kept or {}).items()}
    for manager in sorted((m for m in managers if m.role == "manager"), key=admission_order):
        for name, value in manager.outputs.items():
            found.setdefault(PREFIX + name, value)
    return found


def adopted(kept: Mapping[str, ClusterOutput], managers: Iterable[Machine],
            now: float) -> dict[str, ClusterOutput]:
    """The outputs the cluster is to keep from now on that it does not yet (names only,
    never a new value for a name it keeps): each from the first manager, in admission
    order, that produced it. {} when there is nothing new, which is every pass but a few."""
    found: dict[str, ClusterOutput] = {}
    for manager in sorted((m for m in managers if m.role == "manager"), key=admission_order):
        for name, value in manager.outputs.items():
            if name not in kept and name not in found:
                found[name] = ClusterOutput(value, manager.id, manager.hostname, now)
    return found


def differing(machine: Machine, values: Mapping[str, str]) -> list[str]:
    """The template names of the outputs machine produced with another value than the
    cluster's (values: cluster_outputs), in order."""
    return sorted(PREFIX + name for name, value in machine.outputs.items()
                  if values.get(PREFIX + name, value) != value)


def differing_text(names: Sequence[str], kept: Mapping[str, ClusterOutput]) -> str:
    """What the status and the event say of a manager whose outputs differ from the
    cluster's: never the values (they may be secret), which value is kept and what to do."""
    if not names:
        return ""
    sources = ", ".join(sorted({kept[n[len(PREFIX):]].hostname for n in names
                                if n[len(PREFIX):] in kept}))
    origin = f" (first produced by {sources})" if sources else ""
    return (f"its {', '.join('${' + n + '}' for n in names)} differs from the cluster's"
            f"{origin}, which is kept and handed out: check that this manager joined this "
            "cluster (a control plane of its own would have another CA), then delete it "
            "(coordinator delete) or reset it and add it again")


def available(machine: Machine, managers: Iterable[Machine],
              kept: Mapping[str, ClusterOutput] | None = None) -> dict[str, str]:
    """What a machine's items may be given: the cluster's outputs (cluster_outputs), and its
    own join material while it is minted and not yet used."""
    values = cluster_outputs(managers, kept)
    material = machine.material
    if material is not None and material.minted and material.used_at is None:
        values.update(material.values)
    return values


@dataclass(frozen=True)
class Handed:
    """The part of a phase's items a machine is handed now, the output values they use, and
    the outputs the first item left out waits for (none: every item is handed)."""

    items: list[StateItem]
    values: dict[str, str]
    waits: tuple[str, ...]


def hand_out(items: Sequence[StateItem], values: dict[str, str],
             applied: frozenset[str] = frozenset()) -> Handed:
    """The items up to the first one that uses an output not in values, with the values they
    use: the rest wait for it, since items run in order. An item applied already (in
    applied) whose values are gone (join material, revoked once it was used) is left out
    rather than waited for: it will not run again, and the items after it (a manager's
    control-plane item after its join) must not wait for ever."""
    used: dict[str, str] = {}
    handed: list[StateItem] = []
    for item in items:
        names = references(item)
        missing = tuple(n for n in names if n not in values)
        if missing and item.fingerprint() in applied:
            continue
        if missing:
            return Handed(handed, used, missing)
        used.update({n: values[n] for n in names})
        handed.append(item)
    return Handed(handed, used, ())


def public_names(spec: ClusterSpec) -> frozenset[str]:
    """The outputs spec declares `secret: false`, join material never: it joins a machine to
    the cluster, whatever its item says (the spec's checks refuse saying otherwise)."""
    return frozenset(n for n, found in declared(spec).items()
                     if not found.minted and not found.output.secret)


def secret_names(spec: ClusterSpec, names: Iterable[str]) -> list[str]:
    """Which of names are secret: every output, unless public_names has it; the values a mint
    or revoke job is given from join material are."""
    public = public_names(spec)
    return sorted(n for n in names if n.startswith(PREFIX) and n not in public)


def public_outputs(spec: ClusterSpec, managers: Iterable[Machine],
                   kept: Mapping[str, ClusterOutput] | None = None) -> dict[str, str]:
    """The cluster outputs declared `secret: false`, with their values: what a view may show."""
    public = public_names(spec)
    return {n: v for n, v in cluster_outputs(managers, kept).items() if n in public}


def waits_text(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine]) -> str:
    """What the machine's next item waits for, and on which machine, for the status: "" when
    it waits for nothing. An output no manager of the cluster can produce any more says so,
    with what to do (it would wait for ever)."""
    if not machine.waits:
        return ""
    peers = [m for m in peers if m.cluster == machine.cluster]
    outputs = declared(spec)
    by_id = {m.id: m for m in peers}
    parts = []
    for name in machine.waits:
        found = outputs.get(name)
        if found is None:
            parts.append(f"${{{name}}} (no item declares it now)")
        elif found.minted:
            parts.append(f"${{{name}}}, join material {_minting(machine, by_id)}")
        elif not producers(found.item, peers):
            parts.append(f"${{{name}}} from item {found.item.name}, which no manager of the "
                         f"cluster can run now: {_no_producer(found.item)}")
        else:
            parts.append(f"${{{name}}} from item {found.item.name} "
                         f"{_producer(found.item, peers)}")
    return "waits for " + "; ".join(parts)


def producers(item: StateItem, peers: Sequence[Machine]) -> list[Machine]:
    """The managers, not leaving, that run or may yet run item (its `when` holding for them):
    for a first manager's item, the first manager while it is there (or, before any manager
    was admitted into Deploy, any); otherwise every manager its labels let run it."""
    managers = [m for m in peers if m.role == "manager" and m.state is not MachineState.DELETING
                and all(m.labels.get(k) == v for k, v in (item.when.labels.items()
                                                          if item.when else ()))]
    first = item.when.first_manager if item.when is not None else None
    if first is None or not any(m.deploy_order for m in peers if m.role == "manager"):
        return managers
    return [m for m in managers if (m.deploy_order == 1) is first]


def _no_producer(item: StateItem) -> str:
    when = item.when
    if when is not None and when.first_manager:
        return ("it runs only on the first manager, which was deleted: the value is lost for "
                "good. Have an item every manager runs once its control plane is up produce "
                "it (examples/kubeadm: control-plane), apply the spec, and the joiners go on")
    labels = ", ".join(f"{k}={v}" for k, v in (when.labels.items() if when else ()))
    if labels:
        return (f"no manager has the labels {labels}: label one (coordinator machines label "
                f"HOST {labels.replace(', ', ' ')}) or add a manager that has them")
    return "add a manager (coordinator approve HOST --role manager)"


def _minting(machine: Machine, by_id: dict[str, Machine]) -> str:
    material = machine.material
    minter = by_id.get(material.minter) if material is not None and material.minter else None
    if minter is None:
        return "to be minted once a Ready manager is free"
    return f"being minted on {minter.hostname}"


def _producer(item: StateItem, peers: Sequence[Machine]) -> str:
    """Where the producing item runs, as far as the managers tell."""
    running = [(m, p) for m in peers if m.role == "manager"
               and (p := m.progress) is not None and p.item == item.name]
    if running:
        (m, progress), *_ = running
        return f"on {m.hostname} ({m.state.value}, {progress.status})"
    names = ", ".join(f"{m.hostname} ({m.state.value})" for m in peers if m.role == "manager")
    return f"(not run yet; managers: {names or 'none'})"


def problems(spec: ClusterSpec) -> list[tuple[Location, str]]:
    """What the spec's outputs and conditions get wrong, each with where it is: outputs on
    worker items, join material declared public, two items of one name declaring outputs,
    `when` where it cannot hold."""
    found: list[tuple[Location, str]] = []
    names: dict[str, str] = {}
    for role in ("manager", "worker"):
        for index, item in enumerate(getattr(spec.machine_types, role)):
            where: Location = ("machineTypes", role, index)
            if item.outputs and role == "worker":
                found.append(((*where, "outputs"), "only manager items produce outputs (they "
                              "are kept with the manager that ran them)"))
            if item.phase == "mint":
                found += [((*where, "outputs", at, "secret"), "join material is always secret "
                           "(it joins a machine to the cluster): drop `secret: false`")
                          for at, output in enumerate(item.outputs) if not output.secret]
            if item.outputs and role == "manager":
                if item.name in names and names[item.name] != item.phase:
                    found.append(((*where, "outputs"), f"item {item.name} of phase "
                                  f"{names[item.name]} declares outputs too: "
                                  f"${{outputs.{item.name}...}} would be ambiguous; rename one"))
                names.setdefault(item.name, item.phase)
            if item.phase in JOB_PHASES and role == "worker":
                found.append(((*where, "phase"), f"{item.phase} items run on a Ready manager "
                              "(for another machine): declare them under machineTypes.manager"))
            found += [((*where, "when", *at), why) for at, why in _condition_problems(role, item)]
    return found


def _condition_problems(role: str, item: StateItem) -> list[tuple[Location, str]]:
    when = item.when
    if when is None:
        return []
    if item.phase in ("postdeploy", *JOB_PHASES):
        return [((), f"{item.phase} items run once for the cluster on one manager, not per "
                 "machine: they take no `when`")]
    if when.first_manager is not None and role == "worker":
        return [(("firstManager",), "only managers can be the first manager")]
    if when.first_manager is not None and item.phase == "prepare":
        return [(("firstManager",), "the first manager is chosen when it enters Deploy, after "
                 "its prepare items ran: use it on deploy items")]
    if when.first_upgrader is not None and role == "worker":
        return [(("firstUpgrader",), "only managers upgrade the control plane first")]
    if when.first_upgrader is not None and item.phase != "upgrade":
        return [(("firstUpgrader",), "the first upgrader is chosen when a manager enters "
                 f"Upgrade: use it on upgrade items, not {item.phase} items")]
    if when.first_manager is not None and item.phase == "upgrade":
        return [(("firstManager",), "the first manager may be deleted before an upgrade, and "
                 "then no manager runs the item: use `firstUpgrader` (the manager that "
                 "upgrades first in the release, whichever it is)")]
    return []
