"""What a registration does to the machines of a cluster: a new Pending machine, approved at
once when the cluster auto-approves and its prechecks pass (domain/machines/approval.py); or nothing
when it retries one whose answer was lost. A machine of the hostname already there, Pending or
not, is never displaced: only its own credential gets it back (retried). And a machine's
credential rotated by its agent. Each decided whole, as one `Change`.
Pure: the service supplies the id, the credential's hash, the machine that credential belongs
to and the time."""

from __future__ import annotations

from dataclasses import dataclass, replace

from coordinator.domain.changes import Change, TokenUse
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.machines.approval import approval_failures, auto_approved
from coordinator.domain.machines.pooling import pool_registered
from coordinator.domain.machines.tokens import token_hash
from coordinator.domain.model import POOL, ClusterSettings, Machine, same_hostname
from coordinator.domain.records import CredentialOwner
from nodeagent.wire.protocol import RegisterRequest


@dataclass(frozen=True)
class Credential:
    """A machine credential as stored: its hash and when it expires (None: never)."""

    hash: str
    expires_at: float | None


def registered_before(owner: CredentialOwner, request: RegisterRequest) -> str:
    """The machine a registration retries: the one its credential already belongs to (the
    agent chose it and an earlier attempt registered it, but the answer was lost), whose id it
    gets again. Only from the same hostname: a credential never moves a machine."""
    if not same_hostname(owner.hostname, request.hostname):
        raise Conflict(f"this registration's credential is that of machine {owner.hostname} "
                       f"({owner.machine_id}) in {owner.cluster}, not of {request.hostname}: "
                       "choose a new one")
    return owner.machine_id


def _spelt(existing: Machine, request: RegisterRequest) -> str:
    """The machine holding the name, when it spells it otherwise: the operator looks for it."""
    if existing.hostname == request.hostname:
        return ""
    return (f", as {existing.hostname}, id {existing.id}: Kubernetes node names are "
            "lowercase, so both would be one Node")


def registered(cluster: str, settings: ClusterSettings, existing: Machine | None,
               request: RegisterRequest, credential: Credential, new_id: str,
               now: float, clones: tuple[str, ...] = (), auto_approve: bool = False) -> Change:
    """The machine once `request` is registered, its events and its join token's use (counted
    in the same transaction, so a crash never costs a use without the machine; a refused
    registration costs none), and a pass asked for. A join token must never let
    a second node take over a machine another agent registered, admitted or Pending (an admin
    approving the name would approve the newcomer): a machine of that hostname (model.
    same_hostname: W1 is w1) is refused, naming it. clones: what of its product_uuid and
    MACs other machines hold (domain/machines/clones.py), which keep it from approval. Into
    the pool (cluster POOL), approval is the pool's (domain/machines/pooling.py), auto_approve
    its join token's."""
    where = cluster or "the pool"
    if existing is not None and existing.approved:
        raise Conflict(f"{request.hostname} is already a member of {where} "
                       f"({existing.state.value}{_spelt(existing, request)}); delete it first "
                       "to register anew")
    if existing is not None:
        raise Conflict(f"{request.hostname} is already registered in {where} by another agent "
                       f"(Pending{_spelt(existing, request)}); delete it first to register anew")
    precheck = request.precheck.model_dump(mode="json", by_alias=True)
    machine = Machine(
        id=new_id, cluster=cluster, hostname=request.hostname, ip=request.ip,
        facts=request.facts, precheck=precheck, created_at=now, state_since=now,
        last_seen=now, credential_hash=credential.hash,
        credential_expires_at=credential.expires_at, clones=clones,
        auto_approve=auto_approve and cluster == POOL,
    )
    message = f"{request.hostname} registered " + ("into the pool " if cluster == POOL else "") \
        + f"from {request.ip}"
    failures = approval_failures(settings, machine)
    if failures:
        message += "; hard prechecks failed: " + "; ".join(failures)
    machine, approval = pool_registered(machine, now) if cluster == POOL \
        else auto_approved(settings, machine, now)
    return Change(machines=[machine], events=[event(now, cluster, "registered", message, machine,
                                                    {"precheck_failures": failures}), *approval],
                  token_use=TokenUse(token_hash(request.join_token), now), kick=True)


def rotated(machine: Machine, owner: CredentialOwner | None, credential: Credential,
            now: float) -> Change:
    """The machine once its agent rotated its credential to one it chose (owner: the machine
    that credential belongs to already, if any), with its event. A credential another machine
    holds is refused: each one names a single machine."""
    if owner is not None and owner.machine_id != machine.id:
        raise Conflict("credential: another machine holds this credential; choose a new one")
    updated = replace(machine, credential_hash=credential.hash,
                      credential_expires_at=credential.expires_at)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "credential", f"{machine.hostname} rotated its credential",
        updated, {"expires_at": credential.expires_at})])
