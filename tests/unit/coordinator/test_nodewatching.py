"""The Node watch's verdicts (domain/nodes/nodewatching.py): what one look at a machine's Node
found and patches, and what a change found writes on the machine as stored."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.model import Machine, MachineState, NodeStatus
from coordinator.domain.nodes.nodes import (
    MANAGED_LABELS,
    MANAGED_TAINTS,
    NodeFound,
    desired_metadata,
    observed,
)
from coordinator.domain.nodes.nodewatching import looked, node_recorded, nodes_recorded
from tests.support.builders import cluster, machine

S = MachineState
SPEC = cluster(kubernetes={"kubeconfig": "/etc/coordinator/kubeconfig"})
W1 = replace(machine("w1", state=S.DEPLOY))
IN_STEP = {"node-role.kubernetes.io/worker": ""}
NOW = 500.0


def node(ready: str, labels: dict[str, str] | None = None, managed: bool = True,
         reason: str = "", message: str = "") -> dict[str, Any]:
    annotations = {MANAGED_LABELS: ",".join(sorted(labels or {})), MANAGED_TAINTS: ""} \
        if managed else {}
    return {"metadata": {"name": "w1.lab", "labels": labels or {}, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                       "message": message}]}}


@pytest.mark.parametrize(("name", "read", "ready", "condition", "patched"), [
    (None, None, False, "", False),
    ("w1.lab", node("True", IN_STEP), True, "True", False),
    ("w1.lab", node("False", IN_STEP, reason="KubeletNotReady"), False, "False", False),
    ("w1.lab", node("True", {}, managed=False), True, "True", True),
], ids=["not-registered", "ready-in-step", "not-ready", "labels-out-of-step"])
def test_one_look_s_verdict(name: str | None, read: dict[str, Any] | None, ready: bool,
                            condition: str, patched: bool) -> None:
    look = looked(SPEC, W1, name, read, NOW)
    assert (look.status.name, look.status.ready, look.status.condition) == \
        (name or "", ready, condition)
    assert (look.patch is not None) is patched
    if name is not None:
        assert look.status.metadata == desired_metadata(SPEC, W1).digest()
        assert look.status.registered_at == NOW
    if patched:
        assert look.patch == {"metadata": {"labels": IN_STEP, "annotations": {
            MANAGED_LABELS: "node-role.kubernetes.io/worker", MANAGED_TAINTS: ""}}}


READY = observed(None, 100.0, "w1.lab", ("True", "KubeletReady", ""))
DOWN = observed(READY, NOW, "w1.lab", ("False", "KubeletNotReady", "PLEG is not healthy"))
GONE = observed(READY, NOW, None)


def at(state: MachineState, node_status: NodeStatus | None = READY) -> Machine:
    return replace(machine("w1", state=state), node=node_status)


@pytest.mark.parametrize(("stored", "found", "written", "news"), [
    (at(S.READY), DOWN, True,
     "w1: node w1.lab not Ready: Ready=False (KubeletNotReady) (PLEG is not healthy)"),
    (at(S.READY), GONE, True, "w1: node w1.lab is gone"),
    (at(S.DEPLOY, None), READY, True, "w1: node w1.lab registered and Ready"),
    (at(S.READY), replace(READY, error="503 Service Unavailable"), True, None),
    (at(S.READY), READY, False, None),
    (at(S.DELETING), DOWN, False, None),
    (at(S.PENDING), DOWN, False, None),
    (None, DOWN, False, None),
], ids=["went-not-ready", "deleted", "registered-ready", "cannot-look", "no-change",
        "being-deleted-keeps-its-own", "not-admitted", "machine-gone"])
def test_what_a_change_found_writes(stored: Machine | None, found: NodeStatus, written: bool,
                                    news: str | None) -> None:
    finder = at(S.READY, None if stored is not None and stored.node is None else READY)
    change = node_recorded(stored, NodeFound(finder, found), NOW)
    assert change.writes is written and change.kick is written and not change.wake
    if change.writes:
        [machine_], events = change.machines, change.events
        assert machine_.node == found and machine_.state is stored.state  # type: ignore[union-attr]
        assert [(e.kind, e.message, e.time, e.data) for e in events] == (
            [("node", news, NOW, {"node": found.name, "ready": found.ready})] if news else [])


def test_a_change_is_judged_against_what_its_finder_knew_and_written_on_the_stored_machine(
        ) -> None:
    stored = replace(at(S.READY), labels={"zone": "eu"}, generation=9)
    [updated] = node_recorded(stored, NodeFound(at(S.READY), DOWN), NOW).machines
    assert (updated.labels, updated.generation) == ({"zone": "eu"}, 9)


@pytest.mark.parametrize(("stored", "written", "kinds"), [
    ({"id-w1": at(S.READY), "id-w2": at(S.READY)}, ["id-w1", "id-w2"], ["node", "node"]),
    ({"id-w1": at(S.READY), "id-w2": at(S.DELETING)}, ["id-w1"], ["node"]),
    ({"id-w2": at(S.READY)}, ["id-w2"], ["node"]),
    ({}, [], []),
], ids=["both-written", "one-being-deleted", "one-gone", "none-left"])
def test_what_a_list_found_is_one_change(stored: dict[str, Machine], written: list[str],
                                         kinds: list[str]) -> None:
    """Every machine a look or a list found changed, in one change (the Node watch's one
    transaction), asking for a pass only when it writes."""
    w2 = replace(machine("w2", state=S.READY), node=READY)
    found = [NodeFound(at(S.READY), DOWN), NodeFound(w2, GONE)]
    change = nodes_recorded({i: replace(m, id=i) for i, m in stored.items()}, found, NOW)
    assert [m.id for m in change.machines] == written
    assert [e.kind for e in change.events] == kinds
    assert change.kick is bool(written) and not change.wake and not change.removed
