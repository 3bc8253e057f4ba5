"""JSON views of stored objects, as the API and CLI show them."""

from __future__ import annotations

from typing import Any

from coordinator.model import PHASE_OF_STATE, ClusterSpec, Machine
from coordinator.store.base import AdminToken, Event, JoinToken, StoredCluster


def machine_view(machine: Machine, spec: ClusterSpec | None, detail: bool = False) -> dict[str, Any]:
    phase = PHASE_OF_STATE.get(machine.state)
    items: dict[str, Any] | None = None
    if spec is not None and phase and machine.role:
        phase_items = spec.items(machine.role, phase)
        done = sum(1 for i in phase_items if i.fingerprint() in machine.applied)
        items = {"phase": phase, "done": done, "total": len(phase_items)}
    progress = machine.progress
    view: dict[str, Any] = {
        "id": machine.id,
        "cluster": machine.cluster,
        "hostname": machine.hostname,
        "ip": machine.ip,
        "state": machine.state.value,
        "role": machine.role,
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
        },
        "precheck_failures": machine.precheck_failures(),
        "credential": {"revoked": not machine.credential_hash,
                       "expires_at": machine.credential_expires_at},
    }
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


def join_token_view(token: JoinToken) -> dict[str, Any]:
    return {"id": token.id, "cluster": token.cluster, "created_at": token.created_at,
            "expires_at": token.expires_at, "max_uses": token.max_uses, "uses": token.uses,
            "revoked": token.revoked}


def admin_token_view(token: AdminToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "role": token.role,
            "created_at": token.created_at, "revoked": token.revoked}
