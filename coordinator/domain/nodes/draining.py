"""A drain's every step decided from what was read: on the Kubernetes side (kube.py reads
and acts) whether the pods block it at once, what each eviction's answer leads to (evicted,
retried after a backoff, the pod deleted past its budget, given up), what a drain waits on
and how it ended; on the drainer's side (service/drainer.py) the machine's DrainStatus at each
step (begun, resumed, drained, blocked, skipped, uncordoned, Node deleted, Ready, late) and
whether a recorded step still counts (only while the machine is in Upgrade or Deleting with
the attempt the task ran: an operator's retry, skip or force starts a new one, decided here
too: `drain_answered`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.model import (
    ClusterSpec,
    DrainSettings,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    items_may_run,
    needs_drain,
)
from coordinator.domain.nodes.drain import PodPlan, PodRef

MAX_RETRY_SECONDS = 30.0  # the longest backoff between two evictions of one pod
# The states whose machines' nodes drain tasks work on.
DRAINED_STATES = frozenset({MachineState.UPGRADE, MachineState.DELETING})


@dataclass(frozen=True)
class DrainResult:
    """Where a drain stands: drained or not, the note that says why, what blocks it."""

    drained: bool
    message: str
    evicted: int = 0
    blocking_pods: tuple[str, ...] = ()
    blocking_budgets: tuple[str, ...] = ()
    held_by: str = ""  # another holds the node (maintenance.other_holder): not begun
    workloads: tuple[str, ...] = ()  # what a finished drain evicted (recovery.py)


# -- the Kubernetes side: what to do with the pods -----------------------------------------------

def blocked_at_once(plan: PodPlan, force: bool) -> DrainResult | None:
    """A drain that cannot start: pods the settings do not allow to move (unless the operator
    forced it), each with the setting that would let it go."""
    if not plan.blocking or force:
        return None
    names = tuple(str(p) for p, _ in plan.blocking)
    reasons = "; ".join(f"{p}: {why}" for p, why in plan.blocking)
    return DrainResult(False, f"cannot evict {len(names)} pods: {reasons}", blocking_pods=names)


@dataclass(frozen=True)
class EvictionStep:
    """What follows one answer to a pod's eviction: `evicted` (gone), `delete` (past its
    budget), `retry` after `wait` seconds, or `give-up` (the deadline passed)."""

    action: Literal["evicted", "delete", "retry", "give-up"]
    wait: float = 0.0


def eviction_step(evicted: bool, budget: str | None, failures: int, settings: DrainSettings,
                  force: bool, remaining: float, jitter: float) -> EvictionStep:
    """The eviction policy. evicted: the API server evicted the pod (or it was gone); budget:
    the PodDisruptionBudget a 429 named; failures: this pod's refused attempts, this one
    included; remaining: seconds to the drain's deadline; jitter in [0, 1). A budget is
    bypassed only when the operator forced this drain, or at the deadline when drain.onTimeout
    says force; otherwise the wait doubles from drain.evictionRetrySeconds, capped at
    MAX_RETRY_SECONDS, jittered to between half and all of it, never past the deadline."""
    if evicted:
        return EvictionStep("evicted")
    if budget is not None and force:
        return EvictionStep("delete")
    if remaining <= 0:
        bypass = budget is not None and settings.on_timeout == "force"
        return EvictionStep("delete" if bypass else "give-up")
    wait = min(MAX_RETRY_SECONDS, settings.eviction_retry_seconds * 2 ** (failures - 1))
    return EvictionStep("retry", min(wait * (0.5 + jitter / 2), remaining))


def waiting(waits: Mapping[PodRef, str], budgets: Mapping[PodRef, str]) -> DrainResult:
    """A drain under way: which pods wait on which budget or error."""
    return DrainResult(
        False, "waiting: " + "; ".join(f"{p} ({w})" for p, w in sorted(
            waits.items(), key=lambda i: str(i[0]))),
        blocking_pods=tuple(sorted(map(str, waits))),
        blocking_budgets=tuple(sorted({budgets[p] for p in waits if p in budgets})))


def drain_outcome(plan: PodPlan, gone: Sequence[PodRef], waits: Mapping[PodRef, str],
                  budgets: Mapping[PodRef, str], left: Sequence[PodRef]) -> DrainResult:
    """How a drain ended: drained once every pod it evicted is gone and none waits, else timed
    out naming each pod still waiting (and why) or still terminating, and the budgets in the
    way. gone: the pods evicted or deleted; left: those of them (and the pods terminating
    before) still on the node at the deadline."""
    stuck = {str(p): why for p, why in waits.items() if p not in gone}
    evicted = sum(1 for p in gone if p not in left)
    if stuck or left:
        blocking = tuple(sorted({b for p, b in budgets.items() if str(p) in stuck}))
        pods = tuple(sorted(stuck)) + tuple(str(p) for p in left)
        detail = "; ".join(f"{p} ({why})" for p, why in sorted(stuck.items()))
        if left:
            detail += ("; " if detail else "") + "still terminating: " + ", ".join(map(str, left))
        return DrainResult(False, f"drain timed out: {detail}", evicted, pods, blocking)
    return DrainResult(True, f"{evicted} pods evicted; {len(plan.skipped)} skipped "
                       "(DaemonSet and mirror pods)", evicted)


# -- the drainer's side: the machine's DrainStatus -----------------------------------------------

def begun(machine: Machine, settings: DrainSettings, now: float) -> tuple[DrainStatus, str]:
    """The drain attempt a task runs, and what it says: a new one from now, or the stored one
    going on (after a restart, or an operator's retry or force) with what is left of its
    timeout, which counts from the stored start."""
    status = machine.drain
    if status is None:
        return (DrainStatus(DrainStage.DRAINING, started_at=now),
                f"{machine.hostname}: cordon and drain")
    left = status.started_at + settings.timeout_seconds - now
    return status, (f"{machine.hostname}: draining (attempt {status.attempt}; "
                    f"{max(0.0, left):.0f}s of its timeout left)")


def with_result(status: DrainStatus, result: DrainResult,
                stage: DrainStage | None = None) -> DrainStatus:
    """status carrying a drain's note, what blocks it and how many pods went."""
    return replace(status, stage=stage or status.stage, message=result.message,
                   blocking_pods=result.blocking_pods, blocking_budgets=result.blocking_budgets,
                   evicted=result.evicted, held_by=result.held_by, workloads=result.workloads)


DrainEnd = Literal["drained", "forced", "timed-out", "skipped"]


def ended(hostname: str, status: DrainStatus, result: DrainResult,
          node_found: bool) -> tuple[DrainStatus, str, DrainEnd]:
    """A drain's last status, its event's message and how it ended: skipped when the leaving
    machine's Node never registered, else drained (forced, if the operator forced it) or
    blocked, the node still cordoned."""
    if not node_found:
        return (with_result(status, result, DrainStage.SKIPPED), f"{hostname}: {result.message}",
                "skipped")
    if result.drained:
        return (with_result(status, result, DrainStage.DRAINED),
                f"{hostname} drained: {result.message}", "forced" if status.force else "drained")
    held = " (still held and cordoned)" if status.held else ""
    return (with_result(status, result, DrainStage.BLOCKED),
            f"{hostname} drain blocked{held}: {result.message}", "timed-out")


def step_failed(status: DrainStatus, what: str, error: str, now: float) -> DrainStatus:
    """A node step after the drain (the uncordon, a Node's deletion) failed: retried, and the
    status says so and since when."""
    return replace(status, message=f"{what} failed, retrying: {error}", step_error=error,
                   step_error_since=status.step_error_since or now)


def held_by_another(node: str, holder: str) -> DrainResult:
    """A drain that waits because another holds the node (maintenance.other_holder): nothing
    cordoned or evicted."""
    return DrainResult(False, f"waiting for node {node}, held by {holder}: not cordoned",
                       held_by=holder)


def uncordoned(hostname: str, status: DrainStatus, node: str, given_back: str,
               now: float) -> tuple[DrainStatus, str]:
    """The node given back after the upgrade items (given_back: what became of its cordon,
    maintenance.Release.note): the wait for its Ready condition counts from now."""
    return (replace(status, stage=DrainStage.UNCORDONED, step_error="", step_error_since=None,
                    uncordoned_at=now, held=False,
                    message=f"upgrade items applied; {given_back}; waiting for node {node} to "
                            "report Ready"),
            f"{hostname}: {given_back}")


def node_deleted(hostname: str, status: DrainStatus, done: str) -> tuple[DrainStatus, str]:
    """A leaving machine's Node deleted (done says which, or that none registered)."""
    return (replace(status, stage=DrainStage.NODE_DELETED, message=done, step_error="",
                    step_error_since=None), f"{hostname}: {done}")


def node_ready(hostname: str, status: DrainStatus, node: str,
               now: float) -> tuple[DrainStatus, str]:
    """The node given back reports Ready: the machine may leave Upgrade once the workloads
    its drain evicted are back (recovery.py), waited for from now."""
    return (replace(status, stage=DrainStage.NODE_READY, ready_at=now,
                    message=f"upgrade items applied; node {node} Ready"),
            f"{hostname}: node {node} Ready")


def recovering(status: DrainStatus, short: Sequence[str]) -> DrainStatus:
    """The node Ready again, waiting for what its drain evicted: what is not back yet (the
    note adds for how long: remedies.py)."""
    return replace(status, message=("upgrade items applied; node Ready; waiting for the "
                                    f"workloads its drain evicted: {'; '.join(short)}"))


def recovered(hostname: str, status: DrainStatus, short: Sequence[str],
              timeout: float) -> tuple[DrainStatus, str]:
    """The wait for the evicted workloads is over: they are back, or the timeout passed and
    the upgrade goes on, saying what is not back (short)."""
    if not short:
        said = f"the workloads its drain evicted are available again ({len(status.workloads)})"
    else:
        said = (f"workloads not available {timeout:g}s after the node was Ready, going on: "
                + "; ".join(short))
    return replace(status, stage=DrainStage.RECOVERED, message=said), f"{hostname}: {said}"


def late(status: DrainStatus, node: str, timeout: float, detail: str,
         now: float) -> DrainStatus | None:
    """Past drain.nodeReadyTimeoutSeconds from the uncordon (and not said yet), the stage says
    NodeNotReady, naming the node and what its condition says; None before that."""
    assert status.uncordoned_at is not None
    if now < status.uncordoned_at + timeout or status.stage is DrainStage.NOT_READY:
        return None
    return replace(status, stage=DrainStage.NOT_READY, message=(
        f"node {node} is not Ready {timeout:g}s after the uncordon: {detail}; still checking"))


def awaiting_ready(machine: Machine | None, status: DrainStatus) -> bool:
    """Whether the machine still waits for its node to be Ready in the attempt a task watches
    (not deleted, not moved on without the task)."""
    return machine is not None and machine.drain is not None and machine.drain.stage in (
        DrainStage.UNCORDONED, DrainStage.NOT_READY) and machine.drain.attempt == status.attempt


def same_attempt(now: DrainStatus | None, expected: DrainStatus | None) -> bool:
    """Whether the stored drain is the attempt the caller ran (None: no drain yet)."""
    if now is None or expected is None:
        return now is expected
    return (now.attempt, now.started_at) == (expected.attempt, expected.started_at)


def recorded(spec: ClusterSpec, machine: Machine | None, expected: DrainStatus | None,
             status: DrainStatus, message: str | None,
             now: float) -> Change:
    """A drain step recorded on the machine as it is stored, as one change: the machine with
    status (a new generation when its upgrade items may now run, or may no longer), an event
    for a message, its agent woken (its items or its drain's note changed) and a pass asked
    for; nothing when the step no longer counts (the machine gone, out of Upgrade and
    Deleting, or on another attempt)."""
    if machine is None or machine.state not in DRAINED_STATES \
            or not same_attempt(machine.drain, expected):
        return Change()
    updated = replace(machine, drain=status)
    if items_may_run(spec, updated) != items_may_run(spec, machine):
        updated = replace(updated, generation=machine.generation + 1)
    events = [] if message is None else [event(
        now, machine.cluster, "drain", message, updated,
        {"stage": status.stage.value, "blocking_pods": list(status.blocking_pods),
         "blocking_budgets": list(status.blocking_budgets), "evicted": status.evicted})]
    return Change(machines=[updated], events=events, wake=[machine.id], kick=True)


# -- the operator's side: `upgrade retry|skip|force` ----------------------------------------------
def drain_answered(spec: ClusterSpec, machine: Machine, action: str, now: float) -> Change:
    """The operator's answer to a machine's drain, an upgrade's or a removal's, as one change:
    retry (a new attempt and timeout), skip (run the upgrade or reset items with what is left
    on the node) or force (a new attempt deleting budget-protected pods); a new generation, its
    agent woken and a pass asked for. Conflict when the machine has no drain to answer, or it
    is past draining. The caller cancels the task of the attempt answered first."""
    leaving = machine.state is MachineState.DELETING and machine.drain is not None
    if not leaving and (machine.state is not MachineState.UPGRADE
                        or not needs_drain(spec, machine)):
        raise Conflict(f"{machine.hostname} is {machine.state.value}: it has no drain to "
                       f"{action}")
    current = machine.drain or DrainStatus(DrainStage.DRAINING, now, attempt=0)
    if current.stage not in (DrainStage.DRAINING, DrainStage.BLOCKED):
        raise Conflict(f"{machine.hostname}: its drain is {current.stage.value}, nothing "
                       f"to {action}")
    status = _answered(current, action, now, "resetting" if leaving else "upgrading")
    updated = replace(machine, drain=status, generation=machine.generation + 1)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "drain", f"{machine.hostname}: operator chose {action} (drain "
        f"attempt {status.attempt})", updated, {"action": action})],
        wake=[machine.id], kick=True)


def _answered(current: DrainStatus, action: str, now: float, going_on: str) -> DrainStatus:
    """The drain once the operator answered it; going_on: what the machine does next."""
    if action == "skip":
        return replace(current, stage=DrainStage.SKIPPED, message=(
            f"drain skipped by the operator; {going_on} with "
            f"{len(current.blocking_pods)} pods left on the node"))
    return DrainStatus(DrainStage.DRAINING, now, current.attempt + 1, force=action == "force")
