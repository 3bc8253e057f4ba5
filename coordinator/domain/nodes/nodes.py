"""How the coordinator knows which Kubernetes Node is a machine's: by a mark the machine's own
items put on it through the kubelet's flags, never by hostname (a kubelet may register under
another name: --hostname-override, a cloud provider, an FQDN).

The mark is the label `nodeagent.io/machine-id=<machine id>` (kubelet --node-labels), and
failing that the providerID `nodeagent://<cluster>/<machine id>` (kubelet --provider-id).
A profile sets them from `${machine.id}` and `${cluster.name}`.

Also the pure rules around that Node: when a machine waits for it in Deploy (and what the
status says meanwhile), and which labels and taints the coordinator puts on it and how it
patches them without touching anyone else's. The Kubernetes calls are kube.py's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from coordinator.domain.durations import utc
from coordinator.domain.model import (
    ADMITTED_STATES,
    DEPLOYED_STATES,
    ClusterSpec,
    Machine,
    MachineState,
    NodeStatus,
    kubernetes_access,
    pending_items,
)
from nodeagent.wire.contract import Role

MACHINE_ID_LABEL = "nodeagent.io/machine-id"
PROVIDER_SCHEME = "nodeagent://"


def provider_id(cluster: str, machine_id: str) -> str:
    return f"{PROVIDER_SCHEME}{cluster}/{machine_id}"


def node_of(nodes: Iterable[Mapping[str, Any]], cluster: str, machine_id: str) -> str | None:
    """The name of the machine's Node among nodes (as the API lists them, JSON): the one
    labelled with its id, else the one with its providerID, else None (not registered)."""
    listed = list(nodes)
    for node in listed:
        if (node.get("metadata", {}).get("labels") or {}).get(MACHINE_ID_LABEL) == machine_id:
            return str(node["metadata"]["name"])
    wanted = provider_id(cluster, machine_id)
    for node in listed:
        if (node.get("spec") or {}).get("providerID") == wanted:
            return str(node["metadata"]["name"])
    return None


# --- what the coordinator puts on a Node ----------------------------------------------------

ROLE_LABELS: dict[Role, str] = {"manager": "node-role.kubernetes.io/control-plane",
                                "worker": "node-role.kubernetes.io/worker"}
# The keys (labels) and key:effect (taints) the coordinator put on a Node, so that a later
# change removes only its own and never a label or taint someone else set.
MANAGED_LABELS = "nodeagent.io/managed-labels"
MANAGED_TAINTS = "nodeagent.io/managed-taints"


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    @property
    def ref(self) -> str:
        return f"{self.key}:{self.effect}"


CONTROL_PLANE_TAINT = Taint(ROLE_LABELS["manager"], "NoSchedule")


@dataclass(frozen=True)
class NodeMetadata:
    """The labels and taints a machine's Node should carry by the coordinator's hand."""

    labels: dict[str, str]
    taints: tuple[Taint, ...]

    def digest(self) -> str:
        """Names these labels and taints, for NodeStatus.metadata: equal sets, equal digests."""
        text = json.dumps([sorted(self.labels.items()), sorted(t.ref + "=" + t.value
                                                              for t in self.taints)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def desired_metadata(spec: ClusterSpec, machine: Machine) -> NodeMetadata:
    """The role label (control-plane for managers, worker for workers: kubectl get nodes shows
    them as ROLES, and a kubelet may not set node-role labels on itself), the cluster's labels,
    the machine's own labels (they win over the cluster's on the same key), and on managers
    the control-plane NoSchedule taint when settings.kubernetes.dedicatedManagers is true."""
    labels = {**({ROLE_LABELS[machine.role]: ""} if machine.role else {}),
              **spec.settings.kubernetes.labels, **machine.labels}
    dedicated = machine.role == "manager" and spec.settings.kubernetes.dedicated_managers
    return NodeMetadata(labels, (CONTROL_PLANE_TAINT,) if dedicated else ())


def metadata_patch(node: Mapping[str, Any], desired: NodeMetadata) -> dict[str, Any] | None:
    """The merge patch that brings node (as the API returns it, JSON) to carry desired: labels
    set, the labels and taints the coordinator put there before (its annotations say which)
    and no longer wants removed, everyone else's kept. A change of taints carries the node's
    resourceVersion, so that the API refuses it (409) if another taint came in meanwhile.
    None when the node is as desired."""
    meta = node.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    had_labels = _listed(annotations.get(MANAGED_LABELS))
    had_taints = _listed(annotations.get(MANAGED_TAINTS))
    wanted_refs = {t.ref for t in desired.taints}
    label_changes: dict[str, str | None] = {
        key: None for key in sorted(had_labels - set(desired.labels)) if key in labels}
    label_changes.update((k, v) for k, v in desired.labels.items() if labels.get(k) != v)
    current = list((node.get("spec") or {}).get("taints") or [])
    others = [t for t in current if f"{t.get('key')}:{t.get('effect')}" not in
              (had_taints | wanted_refs)]
    taints = others + [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
                       for t in desired.taints]
    managed = {MANAGED_LABELS: ",".join(sorted(desired.labels)),
               MANAGED_TAINTS: ",".join(sorted(wanted_refs))}
    annotation_changes = {k: v for k, v in managed.items() if annotations.get(k) != v}
    patch: dict[str, Any] = {}
    if label_changes or annotation_changes:
        patch["metadata"] = {**({"labels": label_changes} if label_changes else {}),
                             **({"annotations": annotation_changes} if annotation_changes else {})}
    if _taint_set(taints) != _taint_set(current):
        # The list is replaced whole: only if nobody changed the node since it was read.
        patch["spec"] = {"taints": taints}
        if meta.get("resourceVersion"):
            patch.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]
    return patch or None


def _listed(text: str | None) -> set[str]:
    return {part for part in (text or "").split(",") if part}


def _taint_set(taints: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    return {(str(t.get("key")), str(t.get("effect")), str(t.get("value") or "")) for t in taints}


# --- whether the coordinator looks at Nodes at all ---------------------------------------------


def ready_condition(node: Mapping[str, Any]) -> tuple[str, str, str]:
    """The node's (JSON) Ready condition: status ("True", "False", "Unknown"; "" when it has
    none yet), reason and message."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), {})
    return str(ready.get("status", "")), str(ready.get("reason") or ""), str(ready.get("message") or "")


def node_ready(machine: Machine) -> bool:
    return machine.node is not None and machine.node.ready


def metadata_due(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether the machine's found Node lacks the labels and taints it should now carry (the
    spec's or the machine's labels changed since they were put there)."""
    return (kubernetes_access(spec) and machine.node is not None and bool(machine.node.name)
            and machine.node.metadata != desired_metadata(spec, machine).digest())


def awaits_node(spec: ClusterSpec, machine: Machine) -> bool:
    """A machine in Deploy whose deploy items are all applied and whose Node is not (yet)
    found Ready, in a cluster the coordinator reaches: it stays in Deploy until it is."""
    return (machine.state is MachineState.DEPLOY and kubernetes_access(spec)
            and not node_ready(machine) and not pending_items(spec, machine, "deploy"))


def node_due(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether the coordinator's Node watch owes the machine a look: it awaits its Node, or
    its Node's labels and taints are out of step (Deploy or deployed; never while leaving)."""
    if machine.state not in ADMITTED_STATES:
        return False
    return awaits_node(spec, machine) or metadata_due(spec, machine)


# How often each cluster's Nodes are looked at once a machine is deployed (a Node that goes
# NotReady or is deleted later): one list of the marked Nodes per cluster (NodeWatch).
NODE_HEALTH_SECONDS = 30.0


def watched(spec: ClusterSpec, machine: Machine) -> bool:
    """A deployed machine whose Node the coordinator keeps an eye on, in a cluster it reaches;
    not while a drain holds it (the drainer waits for the Node itself, with its own timeout)."""
    return (machine.state in DEPLOYED_STATES and machine.drain is None
            and kubernetes_access(spec))


def found_down(spec: ClusterSpec, machine: Machine) -> bool:
    """A watched machine whose Node the last look found not Ready, or no longer found: never
    inert (planner.inert_filter), so an idle Ready machine's Node is recorded Ready. A Node
    no look has seen yet (the looks failed: the API server, not the Node, is down) is not."""
    node = machine.node
    return (node is not None and not node.ready and (bool(node.name) or node.unready_since
                                                     is not None) and watched(spec, machine))


def first_sweep_offset(cluster: str, interval: float) -> float:
    """When, within the first interval, a cluster's Nodes are first looked at: a share of
    it drawn from the cluster's name, so that after a start the clusters' lists are spread
    over the interval rather than all sent at once."""
    share = int.from_bytes(hashlib.sha256(cluster.encode()).digest()[:4], "big") / 2**32
    return share * interval


@dataclass(frozen=True)
class Marked:
    """A machine's Node as a list of the marked Nodes shows it."""

    name: str
    condition: tuple[str, str, str]  # ready_condition


def marked_nodes(nodes: Iterable[Mapping[str, Any]], cluster: str) -> dict[str, Marked]:
    """The machines' Nodes among nodes (a Nodes list's items, JSON), by machine id: those
    labelled with an id, and the cluster's providerIDs (node_of's two marks; the label wins)."""
    by_label: dict[str, Marked] = {}
    by_provider: dict[str, Marked] = {}
    prefix = provider_id(cluster, "")
    for node in nodes:
        found = Marked(str(node["metadata"]["name"]), ready_condition(node))
        label = (node["metadata"].get("labels") or {}).get(MACHINE_ID_LABEL)
        if label:
            by_label.setdefault(label, found)
        provider = str((node.get("spec") or {}).get("providerID") or "")
        if provider.startswith(prefix) and len(provider) > len(prefix):
            by_provider.setdefault(provider[len(prefix):], found)
    return {**by_provider, **by_label}


def swept_by_list(spec: ClusterSpec, machine: Machine) -> bool:
    """A watched machine that the node watch does not look at on its own (node_due): the
    periodic list of the cluster's marked Nodes looks at it."""
    return watched(spec, machine) and not node_due(spec, machine)


@dataclass(frozen=True)
class NodeFound:
    """What a look or a list found of a machine's Node, for the Node watch's decision
    (nodewatching.node_recorded) to write or not."""

    machine: Machine
    status: NodeStatus  # what to record: observed, unlike machine.node


@dataclass(frozen=True)
class Sweep:
    """What one look at a cluster's marked Nodes says: the NodeStatus changes to record on
    the machines it was given, and the idle machines (not given, known recorded Ready) to
    load because their Node is not Ready or not found."""

    changes: tuple[NodeFound, ...]
    to_load: tuple[str, ...]


def swept(spec: ClusterSpec, machines: Iterable[Machine], idle: Iterable[str],
          found: Mapping[str, Marked], now: float) -> Sweep:
    """Compare the marked Nodes found (marked_nodes) with the cluster's watched machines and
    the ids of its idle Ready ones. A machine the node watch looks at itself (node_due) is
    left to it. A Node found under another name than recorded is recorded without its
    labels and taints, which makes it due for them (metadata_due)."""
    machines, changes = list(machines), []
    for machine in filter(lambda m: swept_by_list(spec, m), machines):
        mark = found.get(machine.id)
        before = machine.node
        if mark is None:
            after = observed(before, now, None)
        else:
            same = before is not None and before.name == mark.name
            after = observed(before, now, mark.name, mark.condition,
                             before.metadata if before is not None and same else "")
        if after != before:
            changes.append(NodeFound(machine, after))
    given = {m.id for m in machines}  # the pass's stand-in is both loaded and idle
    to_load = tuple(i for i in idle if i not in given
                    and ((mark := found.get(i)) is None or mark.condition[0] != "True"))
    return Sweep(tuple(changes), to_load)


def missing(found: Mapping[str, Marked], machines: Iterable[Machine], idle: Iterable[str]) -> bool:
    """Whether the Node of one of these machines (swept_by_list) or idle ones is not among
    those found by their label: only then is every Node listed, to find those marked by
    providerID alone."""
    return any(m.id not in found for m in machines) or any(i not in found for i in idle)


@dataclass(frozen=True)
class NodeDown:
    text: str  # "node w3 NotReady since 2026-11-26T23:50:00Z: Ready=False (KubeletNotReady)"
    since: float


def node_down(spec: ClusterSpec, machine: Machine) -> NodeDown | None:
    """A watched machine whose Node the last look found not Ready, or no longer found: what
    the status and the machine's note say of it (its state stays as it is)."""
    node = machine.node
    if node is None or not found_down(spec, machine):
        return None
    since = node.unready_since if node.unready_since is not None else node.waiting_since
    at = utc(since)
    if not node.name:
        return NodeDown(f"node gone since {at}: no Node carries the mark of {machine.hostname}",
                        since)
    return NodeDown(f"node {node.name} NotReady since {at}: {described(node)}", since)


# --- what the status says of a machine waiting for its Node ------------------------------------


@dataclass(frozen=True)
class NodeWait:
    text: str  # "waiting for node w3 to register", "... to become Ready: Ready=False (...)"
    waited: float  # seconds since its deploy items were applied
    late_for: float | None  # seconds past settings.kubernetes.nodeReadyTimeoutSeconds


def condition_text(status: str, reason: str, message: str) -> str:
    """The Ready condition as its kubelet posts it: `Ready=False (KubeletNotReady) (message)`."""
    if not status:
        return "no Ready condition"
    return f"Ready={status}" + "".join(f" ({part})" for part in (reason, message) if part)


def described(node: NodeStatus) -> str:
    return condition_text(node.condition, node.reason, node.message)


def node_wait(spec: ClusterSpec, machine: Machine, now: float) -> NodeWait | None:
    """What a machine that awaits its Node (awaits_node) waits for, and for how long: since
    the coordinator began looking for it, else since its last item's report."""
    if not awaits_node(spec, machine):
        return None
    node = machine.node
    if node is None or not node.name:
        text = f"waiting for node {machine.hostname} to register"
    else:
        text = f"waiting for node {node.name} to become Ready: {described(node)}"
    if node is not None and node.error:
        text += f" (cannot look: {node.error})"
    since = node.waiting_since if node is not None else (
        machine.progress.updated_at if machine.progress else machine.state_since)
    waited = max(0.0, now - since)
    late = waited - spec.settings.kubernetes.node_ready_timeout_seconds
    return NodeWait(text, waited, late if late > 0 else None)


# --- recording what was found -----------------------------------------------------------------


def unseen(before: NodeStatus | None, now: float, error: str) -> NodeStatus:
    """The machine's NodeStatus after a look that could not see the Node: what was found
    before stays, with why."""
    return replace(before or NodeStatus(waiting_since=now), error=error)


def observed(before: NodeStatus | None, now: float, name: str | None,
             condition: tuple[str, str, str] = ("", "", ""), metadata: str = "") -> NodeStatus:
    """The machine's NodeStatus after a look that found the Node `name` (None: none yet) with
    this Ready condition, carrying the labels and taints of digest `metadata`. The times are
    kept while the same Node stays registered and Ready."""
    base = before or NodeStatus(waiting_since=now)
    unready = base.unready_since if not base.ready and base.unready_since is not None else now
    if name is None:
        return replace(base, name="", ready=False, condition="", reason="", message="",
                       registered_at=None, ready_since=None, unready_since=unready, metadata="",
                       error="")
    same = base.name == name
    status, reason, message = condition
    ready = status == "True"
    return replace(base, name=name, ready=ready, condition=status, reason=reason, message=message,
                   registered_at=base.registered_at if same and base.registered_at else now,
                   ready_since=(base.ready_since if same and base.ready and base.ready_since
                                else now) if ready else None,
                   unready_since=None if ready else unready, metadata=metadata, error="")


def node_news(hostname: str, before: NodeStatus | None, after: NodeStatus) -> str | None:
    """What an event says of a change in what was found: registered, Ready, NotReady, labelled."""
    was = before or NodeStatus(waiting_since=after.waiting_since)
    if after.name and after.name != was.name:
        news = f"{hostname}: node {after.name} registered"
        return news + (" and Ready" if after.ready else
                       f": {described(after)}")
    if after.name and after.ready != was.ready:
        return f"{hostname}: node {after.name} " + (
            "Ready" if after.ready else
            f"not Ready: {described(after)}")
    if after.name and after.metadata != was.metadata:
        return f"{hostname}: labels and taints of node {after.name} brought in step"
    if was.name and not after.name:
        return f"{hostname}: node {was.name} is gone"
    return None
