"""The Node watch's verdicts (service/nodewatch.py reads the Nodes and acts): what one look
at a machine's Node found and whether its labels and taints need a patch, and what a change
found (by a look or by a cluster's list, nodes.swept) writes on the machine as it is stored:
only a change, only while the machine is admitted (in Deploy or deployed; one being deleted
keeps what it had), with an event when there is news."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from coordinator.domain.events import event
from coordinator.domain.model import ADMITTED_STATES, ClusterSpec, Machine, NodeStatus
from coordinator.domain.nodes import (
    NodeChange,
    desired_metadata,
    metadata_patch,
    node_news,
    observed,
    ready_condition,
)
from coordinator.domain.records import Event


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


def node_recorded(stored: Machine | None, change: NodeChange,
                  now: float) -> tuple[Machine, list[Event]] | None:
    """A change found of a machine's Node, written on the machine as stored: None when it is
    no change from what the finder knew, or the machine is gone or no longer admitted; else
    the machine with the status, and an event when the change is news (node_news)."""
    if change.status == change.machine.node or stored is None \
            or stored.state not in ADMITTED_STATES:
        return None
    status = change.status
    updated = replace(stored, node=status)
    message = node_news(change.machine.hostname, change.machine.node, status)
    events = [] if message is None else [event(
        now, stored.cluster, "node", message, updated, {"node": status.name, "ready": status.ready})]
    return updated, events
