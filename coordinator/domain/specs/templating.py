"""The values StateItem templates may name, defined once: what an assignment fills in
(template_values) and what a new spec's placeholders are checked against before it is stored
(template_problems). A misspelt ${machine.hostnme} is then refused by `cluster apply` and the
upgrade dry run, naming its line, instead of failing forever on the node."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.domain.kubesettings import sandbox_image
from coordinator.domain.labels import key_problem, label_list
from coordinator.domain.model import (
    ClusterSpec,
    Machine,
    address,
    deployed_manager_machines,
    first_manager,
)
from coordinator.domain.specs.catalog import catalog
from coordinator.domain.specs.outputs import JOB_VALUES, JOINING_PHASES, PREFIX, Declared, declared
from nodeagent.wire.addresses import interface_of
from nodeagent.wire.contract import JOB_PHASES, ROLES
from nodeagent.wire.protocol import Location, StateItem
from nodeagent.wire.templates import TemplateError, placeholders, shell_hint


@dataclass(frozen=True)
class _Inputs:
    """What the values of one machine's assignment are computed from."""

    spec: ClusterSpec
    machine: Machine
    managers: list[Machine]  # deployed (Ready, Upgrade, Reconfigure), in registration order
    first: Machine | None  # the one the planner chose to deploy first (model.first_manager)


# Every name a template may use, and how its value is made. The cluster's NTP and proxy
# settings are among them, for items that configure chrony, containerd or the kubelet.
VALUES: dict[str, Callable[[_Inputs], str]] = {
    "cluster.name": lambda v: v.spec.name,
    "cluster.release": lambda v: v.spec.release,
    "machine.id": lambda v: v.machine.id,
    "machine.hostname": lambda v: v.machine.hostname,
    "machine.ip": lambda v: v.machine.ip or "",
    "machine.role": lambda v: v.machine.role or "",
    "managers": lambda v: ",".join(address(m) for m in v.managers),
    "managers.hostnames": lambda v: ",".join(m.hostname for m in v.managers),
    "managers.first": lambda v: address(v.first) if v.first else "",
    "ntp.servers": lambda v: ",".join(v.spec.settings.ntp.servers),
    "ntp.maxSkewSeconds": lambda v: f"{v.spec.settings.ntp.max_skew_seconds:g}",
    "proxy.http": lambda v: v.spec.settings.proxy.http or "",
    "proxy.https": lambda v: v.spec.settings.proxy.https or "",
    "proxy.noProxy": lambda v: ",".join(v.spec.settings.proxy.no_proxy),
    "kubernetes.version": lambda v: v.spec.settings.kubernetes.version or "",
    "kubernetes.allowDowngrade":
        lambda v: "true" if v.spec.settings.kubernetes.allow_downgrade else "false",
    "kubernetes.controlPlaneEndpoint":
        lambda v: v.spec.settings.kubernetes.control_plane_endpoint or "",
    "kubernetes.podSubnet": lambda v: v.spec.settings.kubernetes.pod_subnet,
    "kubernetes.serviceSubnet": lambda v: v.spec.settings.kubernetes.service_subnet,
    "kubernetes.cni": lambda v: v.spec.settings.kubernetes.cni,
    "kubernetes.certificateRenewal": lambda v: v.spec.settings.kubernetes.certificate_renewal,
    "kubernetes.imageRepository": lambda v: v.spec.settings.kubernetes.image_repository,
    "kubernetes.sandboxImage": lambda v: sandbox_image(v.spec.settings.kubernetes),
    "kubernetes.dedicatedManagers":
        lambda v: "true" if v.spec.settings.kubernetes.dedicated_managers else "false",
    "cluster.labels": lambda v: label_list(v.spec.settings.kubernetes.labels),
    "machine.labels": lambda v: label_list(v.machine.labels),
    "machine.interface": lambda v: interface_of(v.machine.facts, v.machine.ip),
    "machine.devices": lambda v: ",".join(_unused_devices(v.machine)),
}

# One name per label besides: ${cluster.labels.KEY} for each label of the spec (checked at
# apply like any name), and ${machine.labels.KEY} for any KEY: a machine's labels change
# after the spec is applied, so a key no machine has yet cannot be refused; it renders ""
# on a machine without it.
CLUSTER_LABEL, MACHINE_LABEL = "cluster.labels.", "machine.labels."


def _unused_devices(machine: Machine) -> list[str]:
    """/dev/NAME of each disk its node found nothing on (no mount, swap, partition in use or
    device-mapper/RAID holder: blockdevices.py's in_use), removable and read-only ones left
    out: what a storage item may take."""
    return [f"/dev/{device['name']}" for device in machine.facts.get("block_devices") or []
            if not (device.get("in_use") or device.get("removable") or device.get("read_only"))]


def _label_values(spec: ClusterSpec, machine: Machine) -> dict[str, str]:
    """${cluster.labels.KEY} of each cluster label; ${machine.labels.KEY} of each of the
    machine's labels, and "" for each other one the spec's items name."""
    named = dict.fromkeys(catalog(spec).derived(_machine_label_names), "")
    return {**{CLUSTER_LABEL + k: v for k, v in spec.settings.kubernetes.labels.items()},
            **named, **{MACHINE_LABEL + k: v for k, v in machine.labels.items()}}


def _machine_label_names(spec: ClusterSpec) -> list[str]:
    """Every ${machine.labels.KEY} the spec's items use (a spec stored before placeholders
    were checked may hold malformed ones: the node names those)."""
    names: list[str] = []
    for role in ROLES:
        for item in getattr(spec.machine_types, role):
            for _, text in _templated(item):
                try:
                    names += (n for n in placeholders(text) if n.startswith(MACHINE_LABEL))
                except TemplateError:
                    continue
    return names


def template_values(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine]) -> dict[str, str]:
    """The value of every name in VALUES for machine, whose cluster's machines include peers
    (the managers among them are what ${managers...} list). ${managers} is the deployed set,
    the very list reconfigure items are versioned by, so that what an item renders is what
    the planner reconfigures for; ${managers.first} the manager the planner chose to deploy
    first, not the first registered."""
    inputs = _Inputs(spec, machine, deployed_manager_machines(peers), first_manager(peers))
    return {**{name: value(inputs) for name, value in VALUES.items()},
            **_label_values(spec, machine)}


def template_problems(spec: ClusterSpec) -> list[tuple[Location, str]]:
    """Every placeholder in spec's items that no assignment fills in, or that is malformed,
    with where it is in the spec: each text the agent substitutes in (see _templated)."""
    problems: list[tuple[Location, str]] = []
    outputs = declared(spec)
    listed: set[str] = set()  # the known names are listed once per answer, with the first
    for role in ROLES:
        for index, item in enumerate(getattr(spec.machine_types, role)):
            for location, text in _templated(item):
                where = ("machineTypes", role, index, *location)
                try:
                    names = placeholders(text)
                except TemplateError as exc:
                    problems.append((where, str(exc)))
                    continue
                problems += [(where, why) for name in names
                             if (why := _unresolved(name, item, spec, outputs, listed))]
    return problems


def _templated(item: StateItem) -> list[tuple[Location, str]]:
    """The item's action's templated texts, and its versionCommand: that runs as the argv of
    the version check the coordinator derives from it (model.py), filled in like exec's."""
    return [*((("action", *location), text) for location, text in item.action.templated()),
            *((("versionCommand", index), arg)
              for index, arg in enumerate(item.version_command or []))]


def _unresolved(name: str, item: StateItem, spec: ClusterSpec,
                outputs: dict[str, Declared], listed: set[str]) -> str:
    """Why an assignment of item would not fill name in ("": it would): the one place that
    decides it. Outputs must be declared, and usable where the item runs: join material in
    the items that join a machine (deploy, upgrade) and in revoke items; cluster outputs in
    any item but prepare ones (they run before any manager deployed) and the producer's own."""
    if name in VALUES or name in _cluster_label_names(spec) or (
            name.startswith(MACHINE_LABEL) and not key_problem(name[len(MACHINE_LABEL):])):
        return ""
    if name in JOB_VALUES:
        return "" if item.phase in JOB_PHASES else (
            f"${{{name}}} is known to mint, revoke and leave items only (the machine they run "
            "for)")
    if not name.startswith(PREFIX):
        return _unknown(name, [*VALUES, *_cluster_label_names(spec)], listed,
                        [f"{MACHINE_LABEL}KEY"])
    found = outputs.get(name)
    if found is None:
        return _unknown(name, list(outputs), listed, what="output")
    if found.minted and item.phase not in (*JOINING_PHASES, "revoke"):
        return (f"${{{name}}} is join material (mint item {found.item.name}), minted for a "
                f"machine's deploy or upgrade items and revoked by revoke items, not for "
                f"{item.phase} items")
    if found.minted:
        return ""
    if item.phase == "prepare":
        return (f"${{{name}}}: prepare items run before any manager deployed, so they cannot "
                "wait for an output; use it in deploy items or later")
    if found.item.name == item.name and found.item.phase == item.phase:
        return f"${{{name}}}: item {item.name} cannot use its own output"
    return ""


def _cluster_label_names(spec: ClusterSpec) -> list[str]:
    return [CLUSTER_LABEL + key for key in spec.settings.kubernetes.labels]


def _unknown(name: str, known: list[str], listed: set[str], also: Sequence[str] = (),
             what: str = "placeholder") -> str:
    """Why name is unknown: the name meant when one is close, else the shell's escape when
    it looks like a shell variable; and the known names, only the first time an answer
    (listed) has this kind of unknown name: a spec with ten typos lists them once."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean ${{{close[0]}}}?" if close else shell_hint(name)
    if what in listed:
        return f"unknown {what} ${{{name}}}{hint}"
    listed.add(what)
    names = ", ".join(f"${{{k}}}" for k in [*known, *also]) or "none declared"
    return f"unknown {what} ${{{name}}}{hint} (known: {names})"
