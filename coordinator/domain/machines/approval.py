"""Approval: why a machine cannot be approved as a role, with what the operator can do about
it, and auto-approval. A registration and every later precheck report of a Pending machine
apply auto-approval alike, so a machine whose prechecks pass only after a fix is approved
then, as it would have been had they passed at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.fitness import Fitness, fitness, fits
from coordinator.domain.model import POOL, ClusterSettings, Machine, MachineState
from coordinator.domain.records import Event
from nodeagent.wire.addresses import AddressError, interface_address, own_address
from nodeagent.wire.contract import ROLES, Role
from nodeagent.wire.protocol import PrecheckReport


def approval_role(settings: ClusterSettings, machine: Machine) -> Role | None:
    """The role a Pending machine would be approved as without the operator: the one set by
    hand, else the cluster's autoApproveRole when it auto-approves."""
    return machine.role or (settings.auto_approve_role if settings.auto_approve else None)


def approval_failures(settings: ClusterSettings, machine: Machine) -> list[str]:
    """The hard checks that stop a Pending machine from being approved as its approval role:
    what its registration and precheck events say."""
    return machine.precheck_failures(approval_role(settings, machine))


def refusal(machine: Machine, role: Role | None) -> str | None:
    """Why machine cannot be approved as role (None: as its own role, if any), naming every
    check in the way and what to do; None when nothing is."""
    wanted = role or machine.role
    judged = fitness(machine.precheck, wanted)
    problems = [*judged.problems, *machine.clones]
    if not problems:
        return None
    who = f"cannot run as a {judged.role}" if wanted else "cannot be approved"
    return (f"{machine.hostname} {who}: hard prechecks failed: " + "; ".join(problems)
            + "." + "".join(f" {advice}" for advice in _advice(machine, judged)))


def _advice(machine: Machine, judged: Fitness) -> list[str]:
    """What helps when the role's minimums are in the way (other failures say their own fix)."""
    if not (judged.short or judged.unmeasured):
        return []
    role = judged.role
    advice = [f"It meets a {other}'s minimums: approve it as a {other} instead."
              for other in ROLES if other != role and fits(machine.precheck, other)]
    if judged.short:
        advice.append(f"To run it as a {role}, give the host what it lacks and restart its "
                      "agent: the agent of a Pending machine checks again when it starts.")
    if judged.short and judged.checked_as != role:
        advice.append(f"Running `nodeagent precheck --role {role}` on the host changes "
                      "nothing: the coordinator judges a role's minimums itself, from the "
                      "values the node measured.")
    if judged.unmeasured:
        advice.append(f"To have them measured, set `role: {role}` in its agent's config and "
                      f"restart the agent: its prechecks then check a {role}'s minimums.")
    return advice


def approval_address(machine: Machine, interface: str | None, ip: str | None) -> str | None:
    """The address machine is approved with (its ${machine.ip}, what ${managers} lists): the
    IPv4 of the interface named, or the ip named, each checked against what its node
    detected; else the one it registered with (its agent's node.interface or node.address,
    else its default-route interface's)."""
    try:
        if interface:
            return interface_address(machine.facts, interface, machine.hostname)
        if ip:
            return own_address(machine.facts, ip, machine.hostname)
    except AddressError as exc:
        raise Conflict(f"{'interface' if interface else 'ip'}: {exc}") from None
    return machine.ip


def approved_event(now: float, machine: Machine, auto: bool = False) -> Event:
    """The `approved` event, alike whether the operator or the cluster approved machine."""
    how = "auto-approved" if auto else "approved"
    note = f" as {machine.role}" if machine.role else " (no role yet: set one to start)"
    return event(now, machine.cluster, "approved", f"{machine.hostname} {how}{note}", machine,
                 {"role": machine.role})


def approval(machine: Machine, role: Role | None, labels: Mapping[str, str] | None,
             interface: str | None, ip: str | None, now: float) -> Change:
    """`machines approve` as one change: a Pending machine approved as role (else its own),
    with labels added to its own and its cluster address chosen (approval_address), and a
    reconcile pass asked for, which starts it. Refused (Conflict, saying why) when it is not
    Pending or its last precheck report does not let it run as that role (refusal; the caller
    judges its clones again first: the machine it shared a value with may be gone)."""
    if machine.state is not MachineState.PENDING:
        raise Conflict(f"{machine.hostname} is {machine.state.value}, not Pending")
    refused = refusal(machine, role)
    if refused:
        raise Conflict(refused)
    updated = replace(machine, approved=True, role=role or machine.role, clones=(),
                      ip=approval_address(machine, interface, ip),
                      labels={**machine.labels, **(labels or {})})
    return Change(machines=[updated], events=[approved_event(now, updated)], kick=True)


def role_set(machine: Machine, role: Role, now: float) -> Change:
    """`machines role` as one change: a Pending machine given its role, with its event.
    Refused (Conflict) once it left Pending, and for an approved one (which starts with the
    role) when its precheck report does not let it run as that role, as approving would; and
    for a machine in the pool, whose role the cluster that claims it gives."""
    if machine.cluster == POOL:
        raise Conflict(f"{machine.hostname} is in the pool: the cluster that claims it gives its "
                       "role (pool.managers or pool.workers of its spec)")
    if machine.state is not MachineState.PENDING:
        raise Conflict(f"{machine.hostname} is {machine.state.value}: its role is fixed "
                       "once it left Pending")
    refused = refusal(machine, role) if machine.approved else None
    if refused:
        raise Conflict(refused)
    updated = replace(machine, role=role)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "role", f"{machine.hostname} role set to {role}", updated,
        {"role": role})], kick=True)


def auto_approved(settings: ClusterSettings, machine: Machine,
                  now: float) -> tuple[Machine, list[Event]]:
    """machine approved, with its event, when the cluster auto-approves and its last precheck
    report lets it run as its approval role; else machine unchanged and no event."""
    if not settings.auto_approve or machine.approved or approval_failures(settings, machine):
        return machine, []
    approved = replace(machine, approved=True, role=approval_role(settings, machine))
    return approved, [approved_event(now, approved, auto=True)]


def prechecked(settings: ClusterSettings, machine: Machine, report: PrecheckReport,
               now: float, clones: tuple[str, ...] = ()) -> Change:
    """A Pending machine's new precheck report (its agent checked again, e.g. after the
    operator fixed the host) recorded, and the machine auto-approved as a registration with
    this report would have approved it; or a prepared machine's report after Prepare, which
    admits it into Deploy once it passes (domain/rollout/prerequisites.py). clones: what of the
    report's product_uuid and MACs other machines hold (domain/machines/clones.py). One
    `Change`: the machine, its events, and a pass asked for."""
    after_prepare = machine.state is MachineState.PREPARE
    if not after_prepare and machine.state is not MachineState.PENDING:
        raise Conflict(f"{machine.hostname} is {machine.state.value}: prechecks only matter "
                       "before approval, and after Prepare")
    if bool(report.prepared) is not after_prepare:
        raise Conflict(f"{machine.hostname} is {machine.state.value}: its prechecks are "
                       + ("those after Prepare (--prepared)" if after_prepare else
                          "those before approval (without --prepared)"))
    updated = replace(machine, precheck=report.model_dump(mode="json", by_alias=True),
                      generation=machine.generation + 1,
                      clones=() if after_prepare else clones)
    if after_prepare:
        unmet = updated.precheck_failures()
        message = (f"{machine.hostname}'s Kubernetes prerequisites hold after Prepare"
                   if not unmet else f"{machine.hostname}'s Kubernetes prerequisites fail "
                   "after Prepare: " + "; ".join(unmet))
        return Change(machines=[updated], events=[event(
            now, machine.cluster, "precheck", message, updated, {"precheck_failures": unmet})],
            kick=True)
    failures = approval_failures(settings, updated)
    message = (f"{machine.hostname} prechecks now pass" if not failures else
               f"{machine.hostname} prechecks still fail: " + "; ".join(failures))
    recorded = event(now, machine.cluster, "precheck", message, updated,
                     {"precheck_failures": failures})
    approved, approval = auto_approved(settings, updated, now)
    return Change(machines=[approved], events=[recorded, *approval], kick=True)
