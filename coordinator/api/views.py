"""JSON views of stored objects, as the API and CLI show them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from coordinator.domain.fitness import to_be_prepared
from coordinator.domain.machines.tokens import join_token_state
from coordinator.domain.model import POOL, ClusterSpec, Machine, MachineState, Material
from coordinator.domain.nodes.forecast import NodeForecast
from coordinator.domain.nodes.nodes import described
from coordinator.domain.pool.remediation import Remediation, Unhealthy
from coordinator.domain.records import (
    AdminToken,
    ClusterOutput,
    EtcdSnapshot,
    Event,
    JoinToken,
    RemovedMachine,
    StoredCluster,
)
from coordinator.domain.releases.versions import join_wait
from coordinator.domain.rollout.planner import MachineUpgrade, UpgradePlan
from coordinator.domain.rollout.remedies import Note, machine_note
from coordinator.domain.rollout.steps import item_states
from coordinator.domain.specs.outputs import (
    cluster_outputs,
    differing,
    differing_text,
    public_outputs,
    waits_text,
)
from coordinator.domain.views.rendering import RenderedMachine, Rendering
from coordinator.domain.views.status import machine_step
from coordinator.service.queries import ClusterStatus
from nodeagent.wire.addresses import interface_of


def machine_view(machine: Machine, spec: ClusterSpec | None, detail: bool = False,
                 now: float | None = None, peers: Sequence[Machine] | None = None,
                 kept: Mapping[str, ClusterOutput] | None = None) -> dict[str, Any]:
    """With `now`, also the machine's step: item n of m, attempt, elapsed times. peers (its
    cluster's machines, or at least its managers; None: not read) name where what it waits
    for is produced and whether a manager runs the control plane, and with kept (the outputs
    the cluster keeps) whether its own outputs differ from the cluster's. Secrets never: its
    join material shows when it was minted and used, never its values."""
    at = machine.state_since if now is None else now
    step = machine_step(spec, machine, at)
    managers = None if peers is None else [p for p in peers if p.role == "manager"]
    peers = peers or ()
    waits = (waits_text(spec, machine, peers) or join_wait(spec, machine, peers)
             if spec is not None else "")
    differ = differing(machine, cluster_outputs(peers, kept)) \
        if peers and machine.outputs else []  # managers' only: workers produce none
    note = machine_note(spec, machine, step, at, waits, failures := machine.precheck_failures(),
                        managers)
    if differ and not note.failing:
        note = Note(f"{note.text}; {differing_text(differ, kept or {})}".lstrip("; "),
                    note.remedy, note.failing, note.actions)
    items: dict[str, Any] | None = None
    if spec is not None and step.phase:
        items = {"phase": step.phase, "done": step.done, "total": step.total}
    progress = machine.progress
    view: dict[str, Any] = {
        "id": machine.id,
        "cluster": machine.cluster or None,
        "pool": machine.cluster == POOL,
        "claim": machine.claim or None,
        "hostname": machine.hostname,
        "ip": machine.ip,
        "state": machine.state.value,
        "role": machine.role,
        "labels": machine.labels,
        "interface": interface_of(machine.facts, machine.ip),
        "approved": machine.approved,
        "responding": machine.responding,
        "last_seen": machine.last_seen,
        "state_since": machine.state_since,
        "items": items,
        "progress": None if progress is None else {
            "item": progress.item,
            "attempt": progress.attempt,
            "status": progress.status,
            "error": progress.error,
            "next_retry_at": progress.next_retry_at,
            "updated_at": progress.updated_at,
            "failing_since": progress.failing_since,
            "gave_up": progress.gave_up,
        },
        "retries": machine.retries,  # items given up on that the operator had run again
        "precheck_failures": failures,
        # prerequisites failing at its last report before Prepare, which its items set
        "precheck_to_be_prepared": to_be_prepared(machine.precheck)
        if machine.state in (MachineState.PENDING, MachineState.PREPARE) else [],
        "release": machine.release,
        "kubernetes": machine.kubernetes,  # the version its items last brought it to
        "managers": list(machine.managers),  # the manager set its items last applied
        "drain": None if machine.drain is None else {
            **asdict(machine.drain), "stage": machine.drain.stage.value,
            "blocking_pods": list(machine.drain.blocking_pods),
            "blocking_budgets": list(machine.drain.blocking_budgets)},
        "node": None if machine.node is None else {
            **asdict(machine.node), "condition_text": described(machine.node)},
        "credential": {"revoked": not machine.credential_hash,
                       "expires_at": machine.credential_expires_at,
                       "reissue_expires_at": machine.reissue_expires_at,
                       "reissue_used_at": machine.reissue_used_at},
        "waits": waits,
        # Why it is where it is and what to do: every view shows this (domain/rollout/remedies.py).
        "note": vars(note),
        "join_material": _material_view(machine.material),
        "minting": None if machine.minting is None else {
            "kind": machine.minting.kind, "for": machine.minting.hostname,
            "serial": machine.minting.serial, "items": list(machine.minting.items),
            "done": list(machine.minting.done)},
    }
    if now is not None:
        view["step"] = dict(vars(step))  # flat: asdict's deep copy costs more than the rest
    if detail:
        view["facts"] = machine.facts
        view["precheck"] = machine.precheck
        view["applied"] = sorted(machine.applied)
        view["phase_items"] = [{"name": name, "status": status, "attempt": attempt}
                               for name, status, attempt in
                               (item_states(spec, machine) if spec is not None else [])]
    return view


def _material_view(material: Material | None) -> dict[str, Any] | None:
    """Join material as a view shows it: when, by whom, for how long; not its values."""
    if material is None:
        return None
    return {"serial": material.serial, "minter": material.minter, "items": list(material.items),
            "requested_at": material.requested_at, "minted_at": material.minted_at,
            "expires_at": material.expires_at, "used_at": material.used_at,
            "revoked_at": material.revoked_at}


def cluster_view(stored: StoredCluster) -> dict[str, Any]:
    return {
        "name": stored.spec.name,
        "release": stored.spec.release,
        "generation": stored.generation,
        "deleting": stored.deleting,
        "created_at": stored.created_at,
        "updated_at": stored.updated_at,
        "spec": stored.spec.model_dump(mode="json", by_alias=True),
    }


def event_view(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "time": event.time,
        "cluster": event.cluster,
        "machine": event.machine,
        "hostname": event.hostname,
        "kind": event.kind,
        "message": event.message,
        "data": event.data,
    }


def upgrade_plan_view(spec: ClusterSpec, plan: UpgradePlan) -> dict[str, Any]:
    return {
        "cluster": spec.name,
        "release": spec.release,
        "paused": spec.settings.upgrade.paused,
        "steps": [[{**_machine_upgrade_view(u), "drain": _forecast_view(plan.forecasts.get(
            u.machine.hostname))} for u in step] for step in plan.steps],
        "waiting": [{**_machine_upgrade_view(u), "reason": u.waiting} for u in plan.waiting],
        "nothing_to_run": [_planned_machine_view(m) for m in plan.nothing_to_run],
        "warnings": plan.warnings,
        "notes": plan.notes,
    }


def _forecast_view(found: NodeForecast | None) -> dict[str, Any] | None:
    """What a machine's drain would meet (None: not drained, or not read)."""
    if found is None:
        return None
    return {"node": found.node, "evicted": list(found.evicted), "blocked": found.blocked,
            "hindrances": [{"severity": h.severity, "what": h.what, "remedy": h.remedy}
                           for h in found.hindrances]}


def _planned_machine_view(machine: Machine) -> dict[str, Any]:
    return {"hostname": machine.hostname, "role": machine.role, "from": machine.release}


def _machine_upgrade_view(upgrade: MachineUpgrade) -> dict[str, Any]:
    """A machine in the upgrade plan, with the items it runs in order."""
    return {**_planned_machine_view(upgrade.machine),
            "items": [{"name": i.name, "phase": i.phase, "version": i.version}
                      for i in upgrade.items]}


def rendering_view(rendering: Rendering) -> dict[str, Any]:
    """What machines would run; fleet is the hypothetical fleet rendered (null: the cluster's
    machines)."""
    fleet = rendering.fleet
    return {"cluster": rendering.spec.name, "release": rendering.spec.release,
            "fleet": None if fleet is None else asdict(fleet),
            "machines": [_rendered_machine_view(m) for m in rendering.machines],
            "notes": list(rendering.notes)}


def _rendered_machine_view(machine: RenderedMachine) -> dict[str, Any]:
    return {"id": machine.id, "hostname": machine.hostname, "ip": machine.ip,
            "role": machine.role, "state": machine.state.value, "release": machine.release,
            "values": machine.values,
            "phases": [{"phase": p.phase, "for": p.joiner, "items": [asdict(i) for i in p.items]}
                       for p in machine.phases]}


def join_token_view(token: JoinToken, now: float) -> dict[str, Any]:
    """state: active, revoked, expired or used up, by the coordinator's clock."""
    return {"id": token.id, "cluster": token.cluster or None, "pool": token.cluster == POOL,
            "auto_approve": token.auto_approve, "created_at": token.created_at,
            "expires_at": token.expires_at, "max_uses": token.max_uses, "uses": token.uses,
            "revoked": token.revoked, "state": join_token_state(token, now)}


def etcd_snapshot_view(snapshot: EtcdSnapshot) -> dict[str, Any]:
    """What is known of a snapshot, never its bytes: whose step it precedes, who took it."""
    return {"id": snapshot.id, "cluster": snapshot.cluster, "taken_at": snapshot.taken_at,
            "before": snapshot.phase, "subject": snapshot.subject, "release": snapshot.release,
            "hostname": snapshot.hostname, "machine": snapshot.machine, "item": snapshot.item,
            "size": snapshot.size, "sha256": snapshot.sha256}


def removed_view(removed: RemovedMachine) -> dict[str, Any]:
    return {"id": removed.machine_id, "cluster": removed.cluster, "hostname": removed.hostname,
            "removed_at": removed.removed_at}


def admin_token_view(token: AdminToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "role": token.role,
            "created_at": token.created_at, "revoked": token.revoked}


def cluster_status_view(status: ClusterStatus, machines: bool = True) -> dict[str, Any]:
    """Without machines: the stages, counts and rollout alone."""
    spec = status.stored.spec
    return {
        "cluster": spec.name,
        "release": spec.release,
        "generation": status.stored.generation,
        "paused": spec.settings.upgrade.paused,
        "post_deploy": asdict(status.post_deploy),
        # Outputs declared `secret: false` (e.g. the control-plane endpoint); secret ones never.
        "outputs": public_outputs(spec, status.machines, status.stored.outputs),
        "counts": status.counts,
        "stages": [asdict(s) for s in status.stages],
        "rollout": asdict(status.rollout),
        # Dates and subjects only: the kubeconfig itself is never shown.
        "certificates": None if status.certificates is None else asdict(status.certificates),
        "held": spec.settings.provision.held,
        "pool": None if spec.pool is None and not status.claim_notes else {
            "roles": [asdict(r) for r in status.claimed], "notes": list(status.claim_notes)},
        "machines": [machine_view(m, spec, now=status.now, peers=status.machines,
                                  kept=status.stored.outputs)
                     for m in status.machines] if machines else None,
    }


def remediation_view(spec: ClusterSpec, found: Sequence[Unhealthy],
                     plan: Remediation) -> dict[str, Any]:
    """The health policy's dry run: the policy, each unhealthy machine with why and when it is
    due, what would be done now and what holds it back."""
    after = spec.settings.health.unhealthy_after_seconds
    return {
        "cluster": spec.name, "policy": {"unhealthy_after_seconds": after,
                                         "max_unhealthy": spec.settings.health.max_unhealthy},
        "unhealthy": [{"hostname": u.machine.hostname, "claim": u.machine.claim or None,
                       "why": u.why, "since": u.since,
                       "due_at": None if after is None else u.since + after} for u in found],
        "actions": list(plan.actions), "notes": list(plan.notes)}
