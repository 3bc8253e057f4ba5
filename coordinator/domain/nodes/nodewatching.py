"""The Node watch's verdicts (service/nodewatch.py reads the Nodes and acts): what one look
at a machine's Node found and whether its labels and taints need a patch, and what a change
found (by a look or by a cluster's list, nodes.swept) writes on the machine as it is stored,
one `Change` for all a look or a list found: only a change, only while the machine is
admitted (in Deploy or deployed; one being deleted keeps what it had), with an event when
there is news."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from coordinator.domain.changes import Change, combined
from coordinator.domain.events import event
from coordinator.domain.model import ADMITTED_STATES, ClusterSpec, Machine, NodeStatus
from coordinator.domain.nodes.nodes import (
    NodeFound,
    desired_metadata,
    metadata_patch,
    node_news,
    observed,
    ready_condition,
)


@dataclass(frozen=True)
class NodeLook:
    """What a look at a machine's Node found (`status`), and the merge patch that brings its
    labels and taints in step (None: they are)."""

    status: NodeStatus
    patch: dict[str, Any] | None = None


def looked(spec: ClusterSpec, machine: Machine, name: str | None,
           node: Mapping[str, Any] | None, now: float) -> NodeLook:
    """The verdict of one look: the Node `name` as read (None: no Node carries the machine's
    mark yet), recorded with the labels and taints it carries once the patch is applied."""
    if name is None or node is None:
        return NodeLook(observed(machine.node, now, None))
    desired = desired_metadata(spec, machine)
    return NodeLook(observed(machine.node, now, name, ready_condition(node), desired.digest()),
                    metadata_patch(node, desired))


def node_recorded(stored: Machine | None, found: NodeFound, now: float) -> Change:
    """A change found of a machine's Node, written on the machine as stored: nothing when it
    is no change from what the finder knew, or the machine is gone or no longer admitted;
    else the machine with the status, an event when the change is news (node_news), and a
    reconcile pass asked for (the planner moves a machine to Ready once its Node is)."""
    if found.status == found.machine.node or stored is None \
            or stored.state not in ADMITTED_STATES:
        return Change()
    status = found.status
    updated = replace(stored, node=status)
    message = node_news(found.machine.hostname, found.machine.node, status)
    events = [] if message is None else [event(
        now, stored.cluster, "node", message, updated, {"node": status.name, "ready": status.ready})]
    return Change(machines=[updated], events=events, kick=True)


def nodes_recorded(stored: Mapping[str, Machine], found: Iterable[NodeFound],
                   now: float) -> Change:
    """What a look or a list found, each on its machine as stored (stored: by id; one
    missing is gone), as one change (node_recorded's each)."""
    return combined(node_recorded(stored.get(f.machine.id), f, now) for f in found)
