"""A machine's life in the pool (its cluster `POOL`), each step decided whole as one `Change`:
registered with a pool join token it is Pending; approved (by the operator, or at once by a
token that approves) once its prechecks pass, it is Uninitialized, available to any cluster
that claims it (domain/pool/claims.py); a claimed machine leaving its cluster comes back, once
its reset items ran, Pending and approved, and is available again only on a new precheck
report that passes: the host is judged as it is after the reset, not as it was."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.machines.approval import refusal
from coordinator.domain.model import POOL, Machine, MachineState
from coordinator.domain.records import Event
from nodeagent.wire.contract import Role
from nodeagent.wire.protocol import PrecheckReport

S = MachineState


def in_pool(machine: Machine) -> bool:
    return machine.cluster == POOL


def available(machine: Machine) -> bool:
    """Whether a cluster may claim it: in the pool, approved and prechecked since."""
    return in_pool(machine) and machine.state is S.UNINITIALIZED and machine.approved


def _made_available(machine: Machine, now: float, how: str) -> tuple[Machine, list[Event]]:
    """machine Uninitialized (available) with its event, when it is approved, or approves
    on its own (auto_approve), and nothing of its last precheck report stops it; else as it
    was, and no event."""
    if not (machine.approved or machine.auto_approve) or machine.precheck_failures():
        return machine, []
    made = replace(machine.with_state(S.UNINITIALIZED, now), approved=True, clones=())
    return made, [event(now, POOL, "approved", f"{machine.hostname} {how}: available in the "
                        "pool", made, {"role": None})]


def pool_registered(machine: Machine, now: float) -> tuple[Machine, list[Event]]:
    """A machine just registered into the pool (Pending), approved at once when its join
    token approves and its prechecks pass (domain/machines/registration.py calls it)."""
    return _made_available(machine, now, "auto-approved")


def pool_approval(machine: Machine, role: Role | None, labels: Mapping[str, str] | None,
                  interface: str | None, ip: str | None, now: float) -> Change:
    """`machines approve` of a pool machine, with labels added to its own (what claims select
    on): available once nothing of its last precheck report stops it. Its role and cluster
    address are the claiming cluster's to give, so a role, interface or ip is refused, as is
    a machine whose prechecks stop it (Conflict, saying why)."""
    asked = [name for name, value in (("role", role), ("interface", interface), ("ip", ip))
             if value]
    if asked:
        raise Conflict(f"{machine.hostname} is in the pool: its {' and '.join(asked)} "
                       "come with the cluster that claims it; approve it without them")
    if machine.state is not S.PENDING:
        raise Conflict(f"{machine.hostname} is {machine.state.value} in the pool, not Pending")
    refused = refusal(machine, None)
    if refused:
        raise Conflict(refused)
    approved = replace(machine, approved=True, labels={**machine.labels, **(labels or {})})
    made, events = _made_available(approved, now, "approved")
    return Change(machines=[made], events=events, kick=True)


def pool_removal(machine: Machine, now: float) -> Change:
    """`machines delete` of a pool machine: its record removed at once (it runs nothing in the
    pool), its agent told so and stopped."""
    return Change(events=[event(now, POOL, "removed", f"{machine.hostname} removed from the "
                                "pool", machine)],
                  removed={machine.id: now}, wake=[machine.id])


def pool_prechecked(machine: Machine, report: PrecheckReport, now: float,
                    clones: tuple[str, ...]) -> Change:
    """A Pending pool machine's new precheck report recorded (one sent after the operator fixed
    the host, or the first after its reset), and the machine made available when it is
    approved (or approves on its own) and the report lets it. One `Change`."""
    if machine.state is not S.PENDING or report.prepared:
        raise Conflict(f"{machine.hostname} is {machine.state.value} in the pool: prechecks "
                       "only matter while it is Pending")
    updated = replace(machine, precheck=report.model_dump(mode="json", by_alias=True),
                      generation=machine.generation + 1, clones=clones)
    failures = updated.precheck_failures()
    recorded = event(now, POOL, "precheck", f"{machine.hostname} prechecks now pass"
                     if not failures else f"{machine.hostname} prechecks fail: "
                     + "; ".join(failures), updated, {"precheck_failures": failures})
    made, events = _made_available(updated, now, "prechecked again" if machine.approved
                                   else "auto-approved")
    return Change(machines=[made], events=[recorded, *events], kick=True)


def returned(machine: Machine, reason: str, now: float) -> tuple[Machine, Event]:
    """A claimed machine whose reset items ran, back in the pool: Pending and approved, with
    nothing of its cluster (items, outputs, Node, join material, role, place), a new
    incarnation (its agent's journal starts empty), and no precheck report until its agent
    sends one (it checks again while Pending). Its labels and facts stay: they are the
    host's."""
    back = replace(
        machine.with_state(S.PENDING, now), cluster=POOL, role=None, approved=True,
        claim="", incarnation=machine.incarnation + 1, precheck={}, applied=frozenset(),
        release="", kubernetes="", managers=(), deploy_order=0, node=None, kubeconfig="",
        outputs={}, material=None, minting=None, member_gone=False, member_stop="",
        retries=0, clones=(), responding=True, remediation="", remedy_serial=0,
        remedy_since=None, remedy_done=())
    return back, event(now, machine.cluster, "returned",
                       f"{machine.hostname} ({machine.claim}) returned to the pool: {reason}; "
                       "available again once its prechecks pass", back,
                       {"claim": machine.claim, "cluster": machine.cluster},
                       machine_id=machine.id, hostname=machine.hostname)
