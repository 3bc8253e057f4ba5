"""The planner: a pure function from (cluster spec, machines) to state transitions.

The ordering invariants of the design (prepare in parallel; the first manager deploys alone,
the other managers one at a time, workers in batches only once a manager is deployed) live
here and nowhere else. No I/O and no clock: the reconciler loads, calls `plan`, persists.

Decisions are ordered so that persisting any prefix of them keeps the invariants: the
transitions that free a deploy slot (or change nothing about slots) come first, and the
admissions into Deploy, which respect the limits after those, come last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.model import PHASE_OF_STATE, ClusterSpec, Machine, MachineState, Role
from nodeagent.protocol import Phase

# Where a machine goes once every item of its state's phase is applied (None: the record is
# removed). Upgrade -> Ready belongs here, and admission into Upgrade (its own batches) beside
# _admit_to_deploy, when upgrades are added; until then machines in Upgrade are left alone.
_ON_PHASE_COMPLETE: dict[MachineState, tuple[MachineState | None, str]] = {
    MachineState.DEPLOY: (MachineState.READY, "deploy items applied"),
    MachineState.RECONFIGURE: (MachineState.READY, "reconfigure items applied"),
    MachineState.DELETING: (None, "reset items applied: machine removed"),
}

# A manager in one of these states runs the control plane: workers may join it.
DEPLOYED_STATES = frozenset({MachineState.READY, MachineState.UPGRADE, MachineState.RECONFIGURE})


@dataclass(frozen=True)
class Decision:
    """One transition: the reconciler persists it and records the reason in the event history."""

    machine_id: str
    hostname: str
    from_state: MachineState
    to_state: MachineState | None  # None: remove the machine record (reset finished)
    reason: str  # human text for the event history


def plan(spec: ClusterSpec, machines: Sequence[Machine]) -> list[Decision]:
    """One pass: every transition the invariants allow now, at most one per machine.

    Deterministic: machines are considered in (created_at, hostname, id) order, whatever
    order the store returned them in.
    """
    complete = _phase_completion(spec)
    ordered = sorted(machines, key=lambda m: (m.created_at, m.hostname, m.id))
    decisions = [d for m in ordered if (d := _advance(complete, m)) is not None]
    after = {m.id: m.state for m in ordered}
    for d in decisions:
        after[d.machine_id] = d.to_state
    return decisions + _admit_to_deploy(spec, complete, ordered, after)


def apply(machines: Sequence[Machine], decisions: Sequence[Decision], now: float) -> list[Machine]:
    """The machines after the decisions, in their input order; removed ones are dropped.

    A decision made from another state than the machine's is refused: it was planned on a
    stale snapshot, and applying it could break the invariants.
    """
    by_id = {d.machine_id: d for d in decisions}
    result: list[Machine] = []
    for machine in machines:
        decision = by_id.get(machine.id)
        if decision is None:
            result.append(machine)
            continue
        if decision.from_state is not machine.state:
            raise ValueError(
                f"{machine.hostname}: decision from {decision.from_state} but machine is {machine.state}"
            )
        if decision.to_state is not None:
            result.append(machine.with_state(decision.to_state, now))
    return result


def plan_to_fixpoint(
    spec: ClusterSpec, machines: Sequence[Machine], now: float, max_passes: int = 20
) -> tuple[list[Machine], list[Decision]]:
    """Plan and apply until nothing moves, so phases without pending items finish at once.

    max_passes bounds the work of one reconcile: a large fleet with empty phases moves one
    manager and one worker batch per pass, and the next reconcile carries on from there.
    """
    current = list(machines)
    taken: list[Decision] = []
    for _ in range(max_passes):
        decisions = plan(spec, current)
        if not decisions:
            break
        current = apply(current, decisions, now)
        taken.extend(decisions)
    return current, taken


def _phase_completion(spec: ClusterSpec) -> Callable[[Machine], bool]:
    """model.phase_complete, with each item's fingerprint hashed once per pass rather than once
    per machine: on a large fleet the hashing is most of the planner's work."""
    wanted: dict[tuple[Role, Phase], frozenset[str]] = {}

    def complete(machine: Machine) -> bool:
        phase = PHASE_OF_STATE.get(machine.state)
        if phase is None:
            return False
        if machine.role is None:  # no items are defined for a machine without a role
            return True
        key = (machine.role, phase)
        if key not in wanted:
            wanted[key] = frozenset(i.fingerprint() for i in spec.items(*key))
        return wanted[key] <= machine.applied

    return complete


def _advance(complete: Callable[[Machine], bool], machine: Machine) -> Decision | None:
    """Transitions that depend on the machine alone: the approval gate and finished phases."""
    if machine.state is MachineState.PENDING:
        if machine.approved and machine.role is not None and not machine.precheck_failures():
            return _decide(machine, MachineState.PREPARE, f"approved as {machine.role}: prepare")
        return None
    target = _ON_PHASE_COMPLETE.get(machine.state)
    if target is not None and complete(machine):
        return _decide(machine, *target)
    return None


def _admit_to_deploy(
    spec: ClusterSpec,
    complete: Callable[[Machine], bool],
    ordered: Sequence[Machine],
    after: dict[str, MachineState | None],
) -> list[Decision]:
    """Prepared machines into Deploy, within the slots left once this pass's completions are in."""
    role_of = {m.id: m.role for m in ordered}
    deploying = [mid for mid, state in after.items() if state is MachineState.DEPLOY]
    managers_deploying = sum(role_of[mid] == "manager" for mid in deploying)
    workers_deploying = sum(role_of[mid] == "worker" for mid in deploying)
    manager_deployed = any(
        role_of[mid] == "manager" and state in DEPLOYED_STATES for mid, state in after.items()
    )
    batch = spec.settings.worker_batch_size
    decisions: list[Decision] = []
    for machine in ordered:
        if machine.state is not MachineState.PREPARE or not complete(machine):
            continue
        if machine.role == "manager" and not manager_deployed:
            if not deploying:
                decisions.append(_decide(machine, MachineState.DEPLOY, "first manager deploys alone"))
                deploying.append(machine.id)
        elif machine.role == "manager":
            if managers_deploying == 0:
                decisions.append(
                    _decide(machine, MachineState.DEPLOY, "next manager deploys (one at a time)")
                )
                managers_deploying += 1
        elif machine.role == "worker" and manager_deployed and workers_deploying < batch:
            workers_deploying += 1
            decisions.append(
                _decide(machine, MachineState.DEPLOY,
                        f"worker deploys ({workers_deploying} of {batch} worker slots)")
            )
    return decisions


def _decide(machine: Machine, to_state: MachineState | None, reason: str) -> Decision:
    return Decision(machine.id, machine.hostname, machine.state, to_state, reason)
