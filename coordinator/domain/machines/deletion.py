"""`machines delete` and `cluster delete`, each one change (domain/changes.py): a machine
leaving goes through Deleting with the drain its removal starts with (domain/nodes/removal.py), or
is removed at once; a cluster leaving is marked deleting with all its machines leaving in the
same transaction, so a crash never leaves it half deleted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coordinator.domain.changes import Change, combined
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.machines.pooling import returned
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.nodes.kubeaccess import NO_KUBECONFIG
from coordinator.domain.nodes.removal import quorum_refusal, removal_drain
from coordinator.domain.records import StoredCluster

S = MachineState


def removal(machine: Machine, machines: Sequence[Machine], spec: ClusterSpec, now: float,
            force: bool = False, skip_reset: bool = False,
            whole_cluster: bool = False) -> Change | None:
    """`machines delete`: the change that takes machine (one of machines, its cluster's) out;
    None when it is already leaving and skip_reset does not remove it at once. It goes
    through Deleting with the drain its removal starts with (none when the cluster cannot be
    reached or leaves whole), unless it never ran items or skip_reset removes the record at
    once. A deployed machine whose node will not be drained (the cluster cannot be reached)
    says so in its event: the operator must not take it for drained. A manager whose leaving
    could cost the control plane its quorum is refused (Conflict, saying why) unless forced;
    the whole cluster leaving, nothing is guarded. A machine claimed from the pool goes back
    there rather than away (domain/machines/pooling.py): at once when it ran no item, else
    once its reset items ran."""
    if machine.state is S.DELETING and not skip_reset:
        return None
    refused = None if whole_cluster else quorum_refusal(machine, machines)
    if refused and not force:
        raise Conflict(refused)
    if machine.claim and not skip_reset and (machine.state is S.PENDING or machine.role is None):
        back, said = returned(machine, "it had run no item", now)
        return Change(machines=[back], events=[said], wake=[machine.id], kick=True)
    if skip_reset or machine.state is S.PENDING or machine.role is None:
        return Change(events=[event(now, machine.cluster, "removed", f"{machine.hostname} removed"
                                    + (" without reset (skipped)" if skip_reset else ""),
                                    machine)],
                      removed={machine.id: now}, wake=[machine.id])
    drain = None if whole_cluster else removal_drain(spec, machines, machine, now)
    updated = replace(machine.with_state(S.DELETING, now), drain=drain)
    then = ("drain, reset items, Node deletion" if drain is not None else "running reset items"
            if whole_cluster or machine.state in (S.PREPARE, S.DEPLOY) else
            f"running reset items; its node is not drained first, {NO_KUBECONFIG}")
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "state", f"{machine.hostname} {machine.state.value} -> Deleting: "
        f"{then}" + (f" (forced, though {refused})" if refused else ""), updated,
        {"from": machine.state.value, "to": "Deleting", "forced": refused is not None})],
        wake=[machine.id], kick=True)


def cluster_deletion(stored: StoredCluster, machines: Sequence[Machine], now: float) -> Change:
    """`cluster delete`: the cluster marked deleting and each of its machines (machines)
    leaving, in one change; every machine runs its reset items and goes, then the cluster
    goes. The whole cluster leaving, no node is drained (its pods have nowhere to go) nor
    guarded."""
    leaving = [removal(m, machines, stored.spec, now, whole_cluster=True) for m in machines]
    return combined([Change(clusters=[replace(stored, deleting=True)], kick=True),
                     *(change for change in leaving if change is not None)])
