"""A cluster spec as an operator sends it (`cluster apply`, the upgrade dry run, `init
--cluster`): the model's validation, then the rules that need the whole spec, every problem
with its line; and, against the cluster as it stands, what may no longer change. Specs
already stored are not checked again: one stored before a rule existed must still load."""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.domain.errors import Conflict
from coordinator.domain.model import ClusterSpec, Machine, first_manager
from coordinator.domain.specs import outputs
from coordinator.domain.specs.templating import template_problems
from nodeagent.wire.contract import ROLES
from nodeagent.wire.protocol import Location
from nodeagent.wire.validation import load_model

# settings.kubernetes fields the control plane is built with: kubeadm writes them into the
# cluster (certificates, kube-proxy, the CNI's pool) when the first manager deploys, and a
# new value reaches no node that already joined. Changing them means a new cluster.
FIXED_NETWORKING = ("control_plane_endpoint", "pod_subnet", "service_subnet", "cni")


def load_spec(text: str, source: str | None = None) -> ClusterSpec:
    """text as a spec, or InvalidDocument naming each problem, e.g. `line 14:
    machineTypes.manager[2].action.argv[1]: unknown placeholder ${machine.hostnme} ...`."""
    return load_model(ClusterSpec, text, source, rules=spec_problems)


def spec_problems(spec: ClusterSpec) -> list[tuple[Location, str]]:
    """The rules that need the whole spec: each item's name and role, placeholders, then
    outputs and conditions. Rules, not the model's validation: a problem is then reported at
    the item's own line, beside every other one, instead of at `machineTypes:` alone."""
    return [*_item_problems(spec), *template_problems(spec), *outputs.problems(spec)]


def _item_problems(spec: ClusterSpec) -> list[tuple[Location, str]]:
    """An item's name used twice in one phase of a role (the name is how reports, retries
    and fingerprints find it), and a worker item reporting a kubeconfig or an etcd snapshot."""
    found: list[tuple[Location, str]] = []
    for role in ROLES:
        first: dict[tuple[str, str], int] = {}
        for index, item in enumerate(getattr(spec.machine_types, role)):
            where: Location = ("machineTypes", role, index)
            at = first.setdefault((item.phase, item.name), index)
            if at != index:
                found.append(((*where, "name"), f"item {item.name!r} appears twice in phase "
                              f"{item.phase} (first as machineTypes.{role}[{at}]): rename one"))
            if role == "worker" and item.kubeconfig_from is not None:
                found.append(((*where, "kubeconfigFrom"), "only manager items report a "
                              "kubeconfig (the coordinator uses the first manager's)"))
            if role == "worker" and item.etcd_snapshot_from is not None:
                found.append(((*where, "etcdSnapshotFrom"), "only manager items upload an "
                              "etcd snapshot (workers run no etcd)"))
    return found


def _kept(before: ClusterSpec | None, spec: ClusterSpec, section: str, name: str) -> ClusterSpec:
    """spec as applied over before, with settings.SECTION.NAME as stored unless the file says
    it: a switch a command flips (upgrade pause, cluster provision) outlives applies that do
    not mention it."""
    settings = spec.settings
    part = getattr(settings, section)
    said = ("settings" in spec.model_fields_set and section in settings.model_fields_set
            and name in part.model_fields_set)
    stored = None if before is None else getattr(getattr(before.settings, section), name)
    if before is None or said or stored == getattr(part, name):
        return spec
    return spec.model_copy(update={"settings": settings.model_copy(
        update={section: part.model_copy(update={name: stored})})})


def pause_kept(before: ClusterSpec | None, spec: ClusterSpec) -> ClusterSpec:
    """spec as applied over before: a file that does not say settings.upgrade.paused keeps
    the stored pause. `upgrade pause` then `cluster apply` of a new release is how a change is
    staged (and checked with `upgrade plan -f`); an apply that silently resumed would start
    the very upgrade the operator held back. A file that says `paused:` is obeyed."""
    return _kept(before, spec, "upgrade", "paused")


def provision_kept(before: ClusterSpec | None, spec: ClusterSpec) -> ClusterSpec:
    """spec as applied over before: a file that does not say settings.provision.held keeps the
    stored hold, as pause_kept keeps the pause: `cluster provision` released it, and a later
    apply that says nothing of it must neither hold the cluster again nor release one held."""
    return _kept(before, spec, "provision", "held")


def check_fixed(before: ClusterSpec, after: ClusterSpec, machines: Iterable[Machine]) -> None:
    """Conflict naming every field after changes that may no longer change: the networking
    settings are fixed once a manager was admitted into Deploy (the first manager's `kubeadm
    init` may have run with them), and stay so while it or a manager after it exists."""
    manager = first_manager(machines, leaving=True)
    if manager is None:
        return
    old, new = before.settings.kubernetes, after.settings.kubernetes
    fixed = [f"settings.kubernetes.{type(old).model_fields[name].alias} cannot change from "
             f"{_shown(getattr(old, name))} to {_shown(getattr(new, name))}: the cluster's "
             f"networking is fixed once the first manager deployed ({manager.hostname} is "
             f"{manager.state.value}); keep the value, or create a new cluster for the new one"
             for name in FIXED_NETWORKING if getattr(old, name) != getattr(new, name)]
    if fixed:
        raise Conflict(f"cluster {after.name} not applied: " + "; ".join(fixed))


def _shown(value: object) -> str:
    return "unset" if value is None else str(value)
