"""A new credential for a machine whose agent lost or was refused its own (`machines reissue`),
keeping its record, items and history: a one-use join string bound to that machine, stored as
a hash on the record, which its agent registers with to bind a credential it chose to the same
record. Pure: the service supplies the hashes and the time."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.durations import utc
from coordinator.domain.errors import Forbidden, Unauthorized
from coordinator.domain.events import event
from coordinator.domain.machines.registration import Credential
from coordinator.domain.machines.tokens import same_token
from coordinator.domain.model import Machine, same_hostname
from coordinator.domain.records import Event
from nodeagent.wire.protocol import RegisterRequest


def reissued(machine: Machine, hashed: str, expires_at: float,
             now: float) -> tuple[Machine, Event]:
    """The machine with a reissue string outstanding: its current credential stops working at
    once (it may be what was lost), and an earlier string it had is replaced."""
    updated = replace(machine, credential_hash="", credential_expires_at=None,
                      reissue_hash=hashed, reissue_expires_at=expires_at, reissue_used_at=None)
    return updated, event(now, machine.cluster, "reissued",
                          f"{machine.hostname}: credential revoked and a one-use join string "
                          f"issued, valid until {utc(expires_at)}", updated,
                          {"expires_at": expires_at})


def reissue(machine: Machine, hashed: str, expires_at: float, now: float) -> Change:
    """`machines reissue` as one change: the machine with its string outstanding and the event,
    its agent woken (the credential it holds is refused from now on)."""
    updated, issued = reissued(machine, hashed, expires_at, now)
    return Change(machines=[updated], events=[issued], wake=[machine.id])


def revocation(machine: Machine, now: float) -> Change:
    """`machines revoke` as one change: the machine keeps its record, its credential no longer
    works (its agent is refused until it is deleted and joins again, or is reissued), the
    event, its agent woken (its long-poll is answered: refused from now on)."""
    updated = replace(machine, credential_hash="", credential_expires_at=None)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "credential", f"{machine.hostname}: credential revoked", updated)],
        wake=[machine.id])


def issued_to(machine: Machine | None, hashed: str) -> bool:
    """Whether a reissue token of this hash was issued to machine (used or not): what a
    registration's token is checked for before its body is read. A retry whose first attempt
    used it must still be read: it gets its machine again."""
    return machine is not None and bool(machine.reissue_hash) \
        and same_token(hashed, machine.reissue_hash)


def rejoin_refusal(machine: Machine, hashed: str, hostname: str, now: float) -> Exception | None:
    """Why this reissue token cannot bind a credential to machine for a node named hostname
    (Unauthorized: the string is no good; Forbidden: it is another node's), or None."""
    again = f"run `coordinator machines reissue {machine.hostname}` for a new one"
    if not issued_to(machine, hashed):
        return Unauthorized(f"this reissue string for {machine.hostname} was replaced by a "
                            f"newer one: {again}")
    if machine.reissue_used_at is not None:
        return Unauthorized(f"this reissue string for {machine.hostname} was used at "
                            f"{utc(machine.reissue_used_at)}; a string binds one credential "
                            f"only: {again}")
    if machine.reissue_expires_at is not None and now >= machine.reissue_expires_at:
        return Unauthorized(f"this reissue string for {machine.hostname} expired at "
                            f"{utc(machine.reissue_expires_at)}: {again}")
    if not same_hostname(hostname, machine.hostname):
        return Forbidden(f"this reissue string is bound to machine {machine.hostname} "
                         f"({machine.id}) in {machine.cluster}, and this node is {hostname}: "
                         f"use it on {machine.hostname}, or create a join token "
                         f"(`coordinator join-token create {machine.cluster}`) for a new machine")
    return None


def rejoined(machine: Machine, request: RegisterRequest, credential: Credential,
             now: float) -> Change:
    """The machine once its agent registered with its reissue string: the new credential
    bound to the same record (id, state, items, history), the string used up, its event and
    a pass asked for. The address it was approved at is kept; its facts and precheck report
    are the ones just sent. No join token's use: the string is the machine's own."""
    updated = replace(machine, credential_hash=credential.hash,
                      credential_expires_at=credential.expires_at, reissue_used_at=now,
                      last_seen=now, facts=request.facts,
                      precheck=request.precheck.model_dump(mode="json", by_alias=True),
                      generation=machine.generation + 1)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "rejoined", f"{machine.hostname} rejoined from {request.ip} with "
        f"its reissue string: a new credential bound to its record ({machine.state.value}, "
        "items and history kept)", updated)], kick=True)
