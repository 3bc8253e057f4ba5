"""Who holds a Node for maintenance, and the patches that take and give back the coordinator's
hold: the cordon is the holder's to undo, never another's.

The hold is the Node annotation `nodeagent.io/maintenance`, a JSON object naming the holder,
since when, and whether the holder cordoned the Node (`cordoned`: false when it was already
unschedulable, which its release then leaves as it was). Any tool, or an operator by hand, may
take a Node by writing it with another holder; the coordinator then waits. It also waits while
kured reboots the Node: kured's `weave.works/kured-reboot-in-progress` Node annotation, or its
lock (the `weave.works/kured-node-lock` annotation of its DaemonSet, kube-system/kured by
default) naming the Node. Taking and releasing are merge patches that carry the Node's
resourceVersion: the API server refuses one that raced another writer (409), and the taker
reads the Node again. docs/kubernetes.md describes it for other tools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAINTENANCE_ANNOTATION = "nodeagent.io/maintenance"
HOLDER = "nodeagent-coordinator"
KURED_REBOOTING = "weave.works/kured-reboot-in-progress"
KURED_LOCK = "weave.works/kured-node-lock"  # on kured's DaemonSet
KURED_DAEMONSET = ("kube-system", "kured")  # kured's defaults (--ds-namespace, --ds-name)
SHOWN = 120  # at most this much of a hold's text another tool wrote is quoted


@dataclass(frozen=True)
class Hold:
    """What the maintenance annotation says."""

    holder: str
    since: str = ""
    cordoned: bool = False  # the holder made the Node unschedulable (it was not before)

    def __str__(self) -> str:
        return self.holder + (f" (since {self.since})" if self.since else "")


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def hold_of(node: dict[str, Any]) -> Hold | None:
    """The Node's hold, None when it has none; one that is not the documented JSON holds it
    all the same, named by its text."""
    text = _annotations(node).get(MAINTENANCE_ANNOTATION)
    if text is None:
        return None
    try:
        value = json.loads(text)
        holder = value["holder"]
        if not isinstance(holder, str) or not holder:
            raise ValueError(holder)
        return Hold(holder, str(value.get("since", "")), value.get("cordoned") is True)
    except (ValueError, TypeError, KeyError):
        return Hold(f"an unreadable {MAINTENANCE_ANNOTATION} annotation {text[:SHOWN]!r}")


def kured_locked_node(daemonset: dict[str, Any] | None) -> str | None:
    """The Node kured's lock names (its DaemonSet's annotation), None when it holds none."""
    text = _annotations(daemonset or {}).get(KURED_LOCK)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    node = value.get("nodeID") if isinstance(value, dict) else None
    return node if isinstance(node, str) and node else None


def other_holder(node: dict[str, Any], kured_node: str | None,
                 holder: str = HOLDER) -> str | None:
    """Who else holds the Node now, as the note names them; None when it is free or ours.
    kured_node: the Node kured's lock names."""
    name = node["metadata"]["name"]
    hold = hold_of(node)
    if hold is not None and hold.holder != holder:
        return str(hold)
    rebooting = _annotations(node).get(KURED_REBOOTING)
    if rebooting is not None:
        return f"kured, rebooting it ({KURED_REBOOTING}: {rebooting[:SHOWN]})"
    if kured_node == name:
        return f"kured's lock ({KURED_LOCK} on daemonset {'/'.join(KURED_DAEMONSET)})"
    return None


def take(node: dict[str, Any], since: str, holder: str = HOLDER) -> dict[str, Any]:
    """The merge patch that holds and cordons a free Node (or one this holder holds already,
    whose record of who cordoned it stands). since: now, RFC 3339."""
    hold = hold_of(node)
    if hold is None or hold.holder != holder:
        hold = Hold(holder, since, cordoned=not (node.get("spec") or {}).get("unschedulable"))
    value = json.dumps({"holder": hold.holder, "since": hold.since, "cordoned": hold.cordoned},
                       sort_keys=True)
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "annotations": {MAINTENANCE_ANNOTATION: value}},
            "spec": {"unschedulable": True}}


@dataclass(frozen=True)
class Release:
    """What giving a Node back does: the patch (None: nothing of the holder's is on it) and
    the note that says what became of the cordon."""

    patch: dict[str, Any] | None
    uncordoned: bool
    note: str


def release(node: dict[str, Any], holder: str = HOLDER) -> Release:
    """The Node given back: the hold removed, and the cordon too when the holder made it."""
    name = node["metadata"]["name"]
    hold = hold_of(node)
    if hold is None or hold.holder != holder:
        held = "no one" if hold is None else str(hold)
        return Release(None, False, f"left as it is: node {name} is not held by the "
                       f"coordinator (held by {held}), so its cordon is not the coordinator's "
                       "to undo")
    patch: dict[str, Any] = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                          "annotations": {MAINTENANCE_ANNOTATION: None}}}
    if not hold.cordoned:
        return Release(patch, False, f"left cordoned: node {name} was unschedulable before the "
                       "drain")
    patch["spec"] = {"unschedulable": None}
    return Release(patch, True, f"uncordoned node {name}")
