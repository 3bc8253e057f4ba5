"""A cluster's health policy (settings.health) decided whole, as Cluster API's MachineHealthCheck
decides it: which claimed machines are unhealthy (their Node NotReady or gone, or their agent
silent) for longer than `unhealthyAfterSeconds`, and which of them are replaced now.

First, when the spec gives remedy items for its role (phase remedy: restart the kubelet...) and
its agent answers, the machine runs them, once per time it is found unhealthy; it is replaced
only if it is still unhealthy `unhealthyAfterSeconds` after they were handed out. Replacing a
machine is taking it out (`machines delete`'s removal: drained while its Node is
Ready, its reset items run while its agent answers, its Node deleted) and letting the claims
(domain/pool/claims.py) fill its place from the pool. A circuit breaker holds it back: when
more machines are unhealthy at once than `maxUnhealthy` (the network or the API server is
more likely at fault than the machines), nothing is remediated and the notes say why; managers
go one at a time and only within the quorum guard. Only claimed machines are replaced: a
machine the cluster registered itself has no pool to come back from. Pure, and the same
decision answers `machines remediate --dry-run`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from coordinator.domain.changes import Change, combined
from coordinator.domain.durations import duration, utc
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.machines.deletion import removal
from coordinator.domain.model import (
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    ordered,
)
from coordinator.domain.nodes.nodes import found_down

S = MachineState


@dataclass(frozen=True)
class Unhealthy:
    """A machine the policy finds unhealthy: since when, and why, as the events say it."""

    machine: Machine
    since: float
    why: str


@dataclass(frozen=True)
class Remediation:
    """What the policy does now: the change (the machines it replaces, with their events),
    what it would do (the dry run's lines) and what holds it back (the status's notes)."""

    change: Change
    actions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def unhealthy(spec: ClusterSpec, machine: Machine) -> Unhealthy | None:
    """Whether a Ready machine is unhealthy now: its Node found NotReady or gone (since it was
    first found so), or its agent silent (since its heartbeat timeout ran out). Not one
    upgrading or reconfiguring: its items restart the kubelet, and a Node NotReady meanwhile
    is their doing (the upgrade's own checks say when it is not back)."""
    if machine.state is not S.READY:
        return None
    node = machine.node
    if found_down(spec, machine) and node is not None and node.unready_since is not None:
        reason = node.reason or node.condition or "no condition"
        what = f"its Node {node.name} is NotReady ({reason})" if node.name \
            else "its Node is gone"
        return Unhealthy(machine, node.unready_since, what)
    if not machine.responding:
        return Unhealthy(machine, machine.last_seen + spec.settings.heartbeat_timeout_seconds,
                         f"its agent has not answered since {utc(machine.last_seen)}")
    return None


def remediation(spec: ClusterSpec, members: Sequence[Machine], now: float) -> Remediation:
    """The health policy over the cluster's machines (members), decided now."""
    policy = spec.settings.health
    after = policy.unhealthy_after_seconds
    if after is None:
        return Remediation(Change())
    sick = [u for m in ordered(members) if (u := unhealthy(spec, m)) is not None]
    replacing = [m for m in members if m.state is S.DELETING and m.remediation]
    due = [u for u in sick if now - u.since >= after]
    if not due:
        return Remediation(Change())
    if len(sick) + len(replacing) > policy.max_unhealthy:
        names = ", ".join(u.machine.hostname for u in sick)
        return Remediation(Change(), notes=(
            f"{len(sick)} machines unhealthy ({names})"
            + (f" and {len(replacing)} being replaced" if replacing else "")
            + f", more than health.maxUnhealthy ({policy.max_unhealthy}): none is remediated; "
            "look for what they share (the network, the API server)",))
    changes, actions, notes = [], [], []
    for found in due:
        machine = found.machine
        if remedy_first(spec, machine, found):
            change = remedied(spec, machine, found, after, now)
            changes.append(change)
            actions.append(change.events[-1].message)
            continue
        since = machine.remedy_since
        if since is not None and since >= found.since and now - since < after:
            continue  # remedied: replaced only if still unhealthy `after` seconds from then
        if not machine.claim:
            notes.append(f"{machine.hostname} is unhealthy ({found.why}) but was not claimed "
                         "from the pool: nothing replaces it; fix or delete it")
            continue
        if machine.role == "manager" and any(
                m.role == "manager" and m.state is S.DELETING for m in members):
            notes.append(f"{machine.hostname} is unhealthy: managers are replaced one at a time")
            continue
        try:
            change = replaced(spec, machine, members, found, after, now)
        except Conflict as refused:
            notes.append(f"{machine.hostname} is unhealthy, not replaced: {refused}")
            continue
        changes.append(change)
        actions.append(change.events[-1].message)
        members = [change.machines[0] if m.id == machine.id else m for m in members]
    return Remediation(combined(changes), tuple(actions), tuple(notes))


def remedy_first(spec: ClusterSpec, machine: Machine, found: Unhealthy) -> bool:
    """Whether an unhealthy machine runs its remedy items before it is replaced: the spec
    gives some for its role, its agent answers (a silent one could not run them), and it has
    not run them since it was found unhealthy."""
    return (machine.role is not None and bool(spec.items(machine.role, "remedy"))
            and machine.responding
            and (machine.remedy_since is None or machine.remedy_since < found.since))


def remedied(spec: ClusterSpec, machine: Machine, found: Unhealthy, after: float,
             now: float) -> Change:
    """An unhealthy machine handed its remedy items (a new run, phase remedy): it is replaced
    only if it is still unhealthy `after` seconds from now."""
    run = replace(machine, remedy_serial=machine.remedy_serial + 1, remedy_since=now,
                  remedy_done=(), generation=machine.generation + 1)
    names = ", ".join(i.name for i in spec.items(machine.role or "worker", "remedy"))
    said = event(now, spec.name, "remedy", f"{machine.hostname} unhealthy for "
                 f"{duration(now - found.since)}: {found.why}; runs its remedy items ({names}), "
                 f"replaced if still unhealthy in {duration(after)}", run,
                 {"reason": found.why, "serial": run.remedy_serial})
    return Change(machines=[run], events=[said], wake=[machine.id])


def replaced(spec: ClusterSpec, machine: Machine, members: Sequence[Machine],
             found: Unhealthy, after: float, now: float) -> Change:
    """One unhealthy claimed machine taken out to be replaced: Deleting, with why; no drain
    while its Node is down (its pods cannot be evicted), the Node deleted after the reset."""
    change = removal(machine, members, spec, now)
    assert change is not None  # a deployed machine not leaving yet
    (leaving,) = change.machines
    drain = leaving.drain
    if drain is not None and found_down(spec, machine):
        drain = DrainStatus(DrainStage.SKIPPED, now, message="its Node is not Ready: no drain; "
                            "the Node is deleted after the reset")
    leaving = replace(leaving, remediation=found.why, drain=drain)
    said = event(now, spec.name, "remediated",
                 f"{machine.hostname} ({machine.claim}) unhealthy for "
                 f"{duration(now - found.since)}, longer than health.unhealthyAfterSeconds "
                 f"({duration(after)}): {found.why}; replaced from the pool (its reset items "
                 "run if its agent answers)", leaving,
                 {"reason": found.why, "since": found.since, "claim": machine.claim})
    return replace(change, machines=[leaving], events=[*change.events, said])
