"""A cluster's claims on the pool (`pool:` in its spec), decided whole as one `Change`: the
machines it claims to reach each role's count, the ones it gives back past it, and what it
cannot do now, said as the status says it.

Deterministic, as Metal3 claims hosts: candidates in the pool's order (domain/model.ordered),
each claim the lowest free place of its role (`worker-0`, `worker-1`...), a place kept by its
machine until it is back in the pool, so names stay stable; scaling down gives back the
highest places first. Workers go back all at once (each drained, reset, returned); managers
one at a time and only within the quorum guard (domain/nodes/removal.py), as `machines delete`
takes them out. A machine leaving its cluster keeps its place until its reset items ran, and
a replacement takes another, so no two machines ever hold one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.changes import Change, combined
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.fitness import fitness
from coordinator.domain.machines.deletion import removal
from coordinator.domain.machines.pooling import available
from coordinator.domain.model import ClusterSpec, Machine, MachineState, ordered, same_hostname
from coordinator.domain.poolspec import RoleClaim
from nodeagent.wire.contract import Role

S = MachineState
PLURAL: dict[Role, str] = {"manager": "managers", "worker": "workers"}


@dataclass(frozen=True)
class Claims:
    """One look at a cluster's claims: what it writes, and what is left undone and why."""

    change: Change
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoleHeld:
    """How a role's claim stands, as the status shows it."""

    role: Role
    wanted: int
    held: int  # claimed machines of the role not leaving


def held(spec: ClusterSpec, members: Sequence[Machine]) -> list[RoleHeld]:
    """Each role the cluster claims: how many it wants and holds now."""
    return [RoleHeld(role, claim.count, sum(m.claim != "" and m.role == role
                                            and m.state is not S.DELETING for m in members))
            for role in ("manager", "worker") if (claim := role_claim(spec, role)) is not None]


def place(role: Role, index: int) -> str:
    return f"{role}-{index}"


def place_index(machine: Machine) -> int:
    """The index of a claimed machine's place (worker-3: 3)."""
    return int(machine.claim.rsplit("-", 1)[1])


def role_claim(spec: ClusterSpec, role: Role) -> RoleClaim | None:
    if spec.pool is None:
        return None
    return spec.pool.managers if role == "manager" else spec.pool.workers


def candidates(spec: ClusterSpec, role: Role, members: Sequence[Machine],
               pool: Sequence[Machine], heard: Mapping[str, float],
               now: float) -> tuple[list[Machine], list[str]]:
    """The pool machines a claim of role may take, in the order it takes them, and why the
    others available do not fit (one text per reason, with how many)."""
    claim = role_claim(spec, role)
    assert claim is not None
    timeout = spec.settings.heartbeat_timeout_seconds
    taken, misses = [], {}
    for machine in ordered(pool):
        if not available(machine):
            continue
        why = claim.selector.mismatches(machine.labels, machine.facts)
        if not why and fitness(machine.precheck, role).problems:
            why = [f"the minimums of a {role}"]
        if not why and now - heard.get(machine.id, machine.last_seen) > timeout:
            why = ["an agent that answers"]
        if not why and any(same_hostname(m.hostname, machine.hostname) for m in members):
            why = ["a hostname no member has"]
        for reason in why:
            misses[reason] = misses.get(reason, 0) + 1
        if not why:
            taken.append(machine)
    return taken, [f"{n} lack {reason}" for reason, n in misses.items()]


def claims(spec: ClusterSpec, members: Sequence[Machine], pool: Sequence[Machine],
           heard: Mapping[str, float], now: float, deleting: bool = False) -> Claims:
    """The claims of a cluster (spec, its machines `members`) on `pool` (the pool's machines;
    heard: when each last answered, where it did since it was stored), decided now. A cluster
    being deleted claims nothing."""
    if spec.pool is None or deleting:
        return Claims(Change())
    changes: list[Change] = []
    notes: list[str] = []
    left = list(pool)
    for role in ("manager", "worker"):
        claim = role_claim(spec, role)
        if claim is None:
            continue
        mine = [m for m in members if m.claim and m.role == role]
        active = [m for m in mine if m.state is not S.DELETING]
        if len(active) < claim.count:
            change, note = _claim_more(spec, role, claim, members, mine, left, heard, now,
                                       claim.count - len(active))
            taken = {m.id for m in change.machines}
            left = [m for m in left if m.id not in taken]
        else:
            change, note = _give_back(spec, role, claim, members, active, now)
        changes.append(change)
        notes += [note] if note else []
    return Claims(combined(changes), tuple(notes))


def _claim_more(spec: ClusterSpec, role: Role, claim: RoleClaim, members: Sequence[Machine],
                mine: Sequence[Machine], pool: Sequence[Machine], heard: Mapping[str, float],
                now: float, wanted: int) -> tuple[Change, str]:
    """Up to `wanted` pool machines claimed as role, each in the lowest free place; and what
    is missing when the pool has fewer that fit."""
    found, misses = candidates(spec, role, members, pool, heard, now)
    places = {place_index(m) for m in mine}
    free = (i for i in range(len(mine) + wanted + 1) if i not in places)
    claimed, events = [], []
    for machine, index in zip(found[:wanted], free, strict=False):
        taken = replace(machine.with_state(S.PENDING, now), cluster=spec.name, role=role,
                        claim=place(role, index), approved=True)
        claimed.append(taken)
        events.append(event(now, spec.name, "claimed", f"{machine.hostname} claimed from the "
                            f"pool as {taken.claim}", taken,
                            {"claim": taken.claim, "role": role}))
    note = ""
    if len(claimed) < wanted:
        plural = PLURAL[role]
        have = claim.count - wanted + len(claimed)
        note = (f"needs {claim.count} {plural} with {claim.selector.text()}; has {have}, and "
                f"the pool has no more that fit" + (f" ({', '.join(misses)})" if misses else ""))
    return Change(machines=claimed, events=events, wake=[m.id for m in claimed],
                  kick=bool(claimed)), note


def _give_back(spec: ClusterSpec, role: Role, claim: RoleClaim, members: Sequence[Machine],
               active: Sequence[Machine], now: float) -> tuple[Change, str]:
    """The machines past the count leaving, highest place first: every worker at once, a
    manager only while none is leaving and the quorum guard lets it; else what holds it."""
    excess = sorted(active, key=place_index, reverse=True)[:len(active) - claim.count]
    if not excess:
        return Change(), ""
    if role == "manager":
        if any(m.role == "manager" and m.state is S.DELETING for m in members):
            return Change(), (f"scaling managers to {claim.count} waits: managers leave one "
                              "at a time")
        excess = excess[:1]
    changes = []
    for machine in excess:
        try:
            change = removal(machine, members, spec, now)
        except Conflict as refused:
            return combined(changes), f"scaling {PLURAL[role]} to {claim.count} waits: {refused}"
        if change is not None:
            changes += [change, Change(events=[event(
                now, spec.name, "released", f"{machine.hostname} ({machine.claim}) goes back "
                f"to the pool: pool.{PLURAL[role]}.count is {claim.count}", machine,
                {"claim": machine.claim})])]
    return combined(changes), ""
