"""Taking a machine out of its cluster safely: whether a manager may be deleted now (the
quorum guard), and how a deleted machine's node leaves Kubernetes.

A removal goes, in order: cordon and drain the node (the cluster's drain settings and
PodDisruptionBudgets, as an upgrade drains); on a manager, have a remaining Ready manager's
leave items remove its etcd member and verify it gone (minting.py runs them as a job;
model.member_removal_due holds the reset items and the record until then, and the note says
why when no manager can: remedies.py), since `kubeadm reset` only warns when it cannot and
the cleanup after it wipes the data; run the reset items, delete its Node, remove the
record. The drain and the Node deletion need the cluster's Kubernetes API: a cluster the
coordinator cannot reach (no settings.kubernetes.kubeconfig, no manager reported one) removes
machines as it always did, etcd member first, then the reset items, and nothing else.
Pure: the planner and the service decide on these.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.model import (
    ADMITTED_STATES,
    DEPLOYED_STATES,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    pending_items,
    reset_skipped,
)
from coordinator.domain.nodes.kubeaccess import kube_access

S = MachineState
# A manager in one of these states is changing the control plane's membership or software:
# another manager leaves only once none is.
_CHANGING = frozenset({S.DEPLOY, S.UPGRADE, S.RECONFIGURE, S.DELETING})


def quorum_refusal(machine: Machine, machines: Sequence[Machine]) -> str | None:
    """Why deleting machine now could cost the control plane its quorum (None: it may go).
    Managers leave one at a time, and only while every other manager is Ready and answers;
    a deployed manager leaves only when the deployed managers left are still a majority of
    the deployed set (3 -> 2 may go, 2 -> 1 may not, the last one never). A manager that has
    not started deploying is no member: it may always go."""
    if machine.role != "manager" or machine.state not in ADMITTED_STATES:
        return None
    others = [m for m in machines if m.role == "manager" and m.id != machine.id]
    busy = [m for m in others if m.state in _CHANGING
            or (m.state in DEPLOYED_STATES and not m.responding)]
    if busy:
        why = ", ".join(f"{m.hostname} is " + (m.state.value if m.responding and m.state in
                                              _CHANGING else "not responding") for m in busy)
        return (f"{machine.hostname} cannot be deleted now: managers leave one at a time, while "
                f"every other manager is Ready and answers ({why}). Delete it once they are, or "
                "delete it anyway with force (coordinator delete --force)")
    if machine.state not in DEPLOYED_STATES:
        return None  # still joining: the quorum of the deployed set does not count it
    deployed = 1 + sum(m.state in DEPLOYED_STATES for m in others)
    majority = deployed // 2 + 1
    if deployed == 1:
        return (f"{machine.hostname} is the last deployed manager: deleting it takes the "
                "cluster's control plane down. Delete the cluster instead, add a manager "
                "first, or delete it anyway with force (coordinator delete --force)")
    if deployed - 1 < majority:
        return (f"deleting {machine.hostname} would leave {deployed - 1} of the {deployed} "
                f"deployed managers, fewer than a majority ({majority}): etcd could lose its "
                "quorum. Add a manager first, or delete it anyway with force "
                "(coordinator delete --force)")
    return None


def reachable(spec: ClusterSpec, machines: Sequence[Machine], leaving: Machine) -> bool:
    """Whether the coordinator reaches the cluster's Kubernetes API once leaving is Deleting:
    the cluster setting names a kubeconfig, or another manager reported one."""
    return kube_access(spec, [m for m in machines if m.id != leaving.id]) is not None


def removal_drain(spec: ClusterSpec, machines: Sequence[Machine], leaving: Machine,
                  now: float) -> DrainStatus | None:
    """What a machine entering Deleting records of its node: None when the cluster cannot be
    reached (its reset items run at once, and nothing more, as before); a drain to start
    (reset items wait for it); or, with drain.enabled false, a drain skipped (its reset items
    run at once, its Node is deleted after them)."""
    if not reachable(spec, machines, leaving):
        return None
    if not spec.settings.drain.enabled:
        return DrainStatus(DrainStage.SKIPPED, now, message=(
            "drain.enabled is false: no cordon or drain; the Node is deleted after the reset "
            "items"))
    return DrainStatus(DrainStage.DRAINING, now, message="cordon and drain before the reset items")


def node_deletion_due(spec: ClusterSpec, machine: Machine) -> bool:
    """A Deleting machine whose drain is over and whose reset items are applied: its Node is
    deleted next."""
    return (machine.state is S.DELETING and machine.drain is not None
            and machine.drain.stage in (DrainStage.DRAINED, DrainStage.SKIPPED)
            and (not pending_items(spec, machine, "reset") or reset_skipped(machine)))


def may_lack_node(machine: Machine) -> bool:
    """Whether the machine's drain goes on without a Node carrying its mark (domain/nodes/nodes.py):
    a leaving machine's kubelet may never have registered one, and then there is nothing to
    drain or delete; an upgrading machine's Node must be there."""
    return machine.state is S.DELETING


def unregistered(machine: Machine) -> str:
    """What a leaving machine's drain and Node deletion say when no Node carries its mark."""
    return (f"no Node carries the mark of {machine.hostname} (never registered): no drain, "
            "no Node to delete")


def may_be_removed(machine: Machine) -> bool:
    """Whether a Deleting machine whose reset items are applied may lose its record: it has
    no Kubernetes side, or its Node is deleted."""
    return machine.drain is None or machine.drain.stage is DrainStage.NODE_DELETED
