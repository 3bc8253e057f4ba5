"""Who holds a Node for maintenance, and what taking and giving it back patches
(domain/nodes/maintenance.py): the coordinator never undoes a cordon it did not make."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.domain.model import DrainStage, DrainStatus
from coordinator.domain.nodes.draining import ended, held_by_another
from coordinator.domain.nodes.maintenance import (
    HOLDER,
    KURED_LOCK,
    KURED_REBOOTING,
    MAINTENANCE_ANNOTATION,
    Hold,
    hold_of,
    kured_locked_node,
    other_holder,
    release,
    take,
)


def node(unschedulable: bool = False, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "w1", "resourceVersion": "41", "annotations": annotations},
            "spec": {"unschedulable": True} if unschedulable else {}}


def taken(before: dict[str, Any], since: str = "2026-11-28T10:00:00Z") -> dict[str, Any]:
    """The Node once the coordinator's take patch is merged into it."""
    patch = take(before, since)
    annotations = {**before["metadata"]["annotations"], **patch["metadata"]["annotations"]}
    return {"metadata": {"name": "w1", "resourceVersion": "42", "annotations": annotations},
            "spec": {**before["spec"], **patch["spec"]}}


def test_taking_a_schedulable_node_cordons_it_and_records_that_the_coordinator_did() -> None:
    patch = take(node(), "2026-11-28T10:00:00Z")
    assert patch["metadata"]["resourceVersion"] == "41"  # a precondition: no lost race
    assert patch["spec"] == {"unschedulable": True}
    assert json.loads(patch["metadata"]["annotations"][MAINTENANCE_ANNOTATION]) == {
        "holder": HOLDER, "since": "2026-11-28T10:00:00Z", "cordoned": True}
    given = release(taken(node()))
    assert given.uncordoned and given.note == "uncordoned node w1"
    assert given.patch == {"metadata": {"resourceVersion": "42",
                                        "annotations": {MAINTENANCE_ANNOTATION: None}},
                           "spec": {"unschedulable": None}}


def test_a_node_cordoned_by_someone_else_stays_cordoned_when_given_back() -> None:
    held = taken(node(unschedulable=True))
    assert hold_of(held) == Hold(HOLDER, "2026-11-28T10:00:00Z", cordoned=False)
    given = release(held)
    assert not given.uncordoned
    assert given.note == "left cordoned: node w1 was unschedulable before the drain"
    assert given.patch is not None and "spec" not in given.patch  # only the hold goes


def test_taking_a_node_again_keeps_who_cordoned_it() -> None:
    """A retried drain finds the node cordoned by its own first attempt: still the
    coordinator's cordon to undo, still since the first."""
    again = taken(taken(node()), since="2026-11-28T11:00:00Z")
    assert hold_of(again) == Hold(HOLDER, "2026-11-28T10:00:00Z", cordoned=True)


def test_a_node_not_held_by_the_coordinator_is_left_as_it_is() -> None:
    for found in (node(unschedulable=True),
                  node(**{MAINTENANCE_ANNOTATION: json.dumps({"holder": "ops-team"})})):
        given = release(found)
        assert given.patch is None and not given.uncordoned
        assert "not held by the coordinator" in given.note


@pytest.mark.parametrize(("annotations", "kured_node", "holder"), [
    ({}, None, None),
    ({MAINTENANCE_ANNOTATION: json.dumps({"holder": HOLDER, "cordoned": True})}, None, None),
    ({MAINTENANCE_ANNOTATION: json.dumps({"holder": "ops-team", "since": "T"})}, None,
     "ops-team (since T)"),
    ({MAINTENANCE_ANNOTATION: "by hand"}, None,
     f"an unreadable {MAINTENANCE_ANNOTATION} annotation 'by hand'"),
    ({MAINTENANCE_ANNOTATION: json.dumps({"holder": ""})}, None,
     f"an unreadable {MAINTENANCE_ANNOTATION} annotation '{{\"holder\": \"\"}}'"),
    ({KURED_REBOOTING: "2026-11-28T09:00:00Z"}, None,
     f"kured, rebooting it ({KURED_REBOOTING}: 2026-11-28T09:00:00Z)"),
    ({}, "w1", f"kured's lock ({KURED_LOCK} on daemonset kube-system/kured)"),
    ({}, "w2", None),
], ids=["free", "ours", "another-tool", "by-hand", "no-holder", "kured-rebooting",
        "kured-lock", "kured-lock-elsewhere"])
def test_who_else_holds_a_node(annotations: dict[str, str], kured_node: str | None,
                               holder: str | None) -> None:
    assert other_holder(node(**annotations), kured_node) == holder


@pytest.mark.parametrize(("annotations", "locked"), [
    ({KURED_LOCK: json.dumps({"nodeID": "w1", "created": "T", "TTL": 0})}, "w1"),
    ({KURED_LOCK: json.dumps({"nodeID": ""})}, None),  # kured's released lock
    ({KURED_LOCK: "not json"}, None),
    ({}, None),
], ids=["held", "released", "unreadable", "none"])
def test_the_node_kureds_lock_names(annotations: dict[str, str], locked: str | None) -> None:
    assert kured_locked_node({"metadata": {"annotations": annotations}}) == locked
    assert kured_locked_node(None) is None


def test_a_drain_blocked_waiting_for_another_holder_never_says_it_cordoned() -> None:
    waiting = DrainStatus(DrainStage.DRAINING, started_at=100.0)
    status, said, _ = ended("w1", waiting, held_by_another("w1", "ops-team"), True)
    assert status.stage is DrainStage.BLOCKED and not status.held
    assert said == "w1 drain blocked: waiting for node w1, held by ops-team: not cordoned"
