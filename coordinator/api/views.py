"""JSON views of stored objects, as the API and CLI show them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from coordinator.domain.model import ClusterSpec, Machine
from coordinator.domain.planner import MachineUpgrade, UpgradePlan
from coordinator.domain.records import AdminToken, Event, JoinToken, StoredCluster
from coordinator.domain.status import machine_step
from coordinator.service.queries import ClusterStatus
from nodeagent.addresses import interface_of


def machine_view(machine: Machine, spec: ClusterSpec | None, detail: bool = False,
                 now: float | None = None) -> dict[str, Any]:
    """With `now`, also the machine's step: item n of m, attempt, elapsed times."""
    step = machine_step(spec, machine, machine.state_since if now is None else now)
    items: dict[str, Any] | None = None
    if spec is not None and step.phase:
        items = {"phase": step.phase, "done": step.done, "total": step.total}
    progress = machine.progress
    view: dict[str, Any] = {
        "id": machine.id,
        "cluster": machine.cluster,
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
        },
        "precheck_failures": machine.precheck_failures(),
        "release": machine.release,
        "managers": list(machine.managers),  # the manager set its items last applied
        "drain": None if machine.drain is None else {
            **asdict(machine.drain), "stage": machine.drain.stage.value,
            "blocking_pods": list(machine.drain.blocking_pods),
            "blocking_budgets": list(machine.drain.blocking_budgets)},
        "credential": {"revoked": not machine.credential_hash,
                       "expires_at": machine.credential_expires_at},
    }
    if now is not None:
        view["step"] = dict(vars(step))  # flat: asdict's deep copy costs more than the rest
    if detail:
        view["facts"] = machine.facts
        view["precheck"] = machine.precheck
        view["applied"] = sorted(machine.applied)
    return view


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
        "steps": [[_machine_upgrade_view(u) for u in step] for step in plan.steps],
        "waiting": [{**_machine_upgrade_view(u), "reason": u.waiting} for u in plan.waiting],
        "nothing_to_run": [_planned_machine_view(m) for m in plan.nothing_to_run],
    }


def _planned_machine_view(machine: Machine) -> dict[str, Any]:
    return {"hostname": machine.hostname, "role": machine.role, "from": machine.release}


def _machine_upgrade_view(upgrade: MachineUpgrade) -> dict[str, Any]:
    """A machine in the upgrade plan, with the items it runs in order."""
    return {**_planned_machine_view(upgrade.machine),
            "items": [{"name": i.name, "phase": i.phase, "version": i.version}
                      for i in upgrade.items]}


def join_token_view(token: JoinToken) -> dict[str, Any]:
    return {"id": token.id, "cluster": token.cluster, "created_at": token.created_at,
            "expires_at": token.expires_at, "max_uses": token.max_uses, "uses": token.uses,
            "revoked": token.revoked}


def admin_token_view(token: AdminToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "role": token.role,
            "created_at": token.created_at, "revoked": token.revoked}


def cluster_status_view(status: ClusterStatus) -> dict[str, Any]:
    spec = status.stored.spec
    return {
        "cluster": spec.name,
        "release": spec.release,
        "generation": status.stored.generation,
        "paused": spec.settings.upgrade.paused,
        "post_deploy": asdict(status.post_deploy),
        "counts": status.counts,
        "stages": [asdict(s) for s in status.stages],
        "rollout": asdict(status.rollout),
        "machines": [machine_view(m, spec, now=status.now) for m in status.machines],
    }
