"""Where each machine is within its phase (the item it runs, how far it has come, how it fails)
and each machine's state changes: what the rollout status reads per machine.

Pure in what it answers: computed from the spec, the machine and its history, with `now`
passed in; the items' fingerprints come from catalog.py's cache, as the API asks for every
machine's step of one spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Literal

from coordinator.domain.model import PHASE_OF_STATE, ClusterSpec, Machine, MachineState
from coordinator.domain.nodes.nodes import NodeWait, node_wait
from coordinator.domain.records import Event
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.specs.catalog import Entry
from nodeagent.wire.contract import Phase

StepStatus = Literal["running", "failed", "waiting", "done"]


@dataclass(frozen=True)
class MachineStep:
    """Where a machine is within its current phase: item `index` of `total`."""

    phase: Phase | None
    done: int
    total: int
    index: int  # 1-based position of `item` in the phase; 0 when there is none
    item: str | None
    attempt: int
    status: StepStatus | None  # None: the state runs no phase (Pending, Ready)
    state_elapsed: float
    item_elapsed: float | None
    failing_for: float | None
    next_retry_in: float | None
    error: str
    node: str = ""  # what the machine waits for of its Node, once its deploy items are applied
    node_waiting: float | None = None  # for how long it has waited for it
    gave_up: bool = False  # failed, and its agent stopped retrying it (domain/assignments/retries.py)


class History:
    """Each machine's state changes, oldest first, from the `state` events."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        # Per machine, each state it entered with the time it first did, in the order it first
        # did: the first entry into any of a set of states is the first key found in it.
        self._firsts: dict[str, dict[str, float]] = {}
        self._versions: dict[str, int] = {}
        self.extend(events)

    def extend(self, events: Iterable[Event]) -> None:
        """Take in later events (a kept status reads only what was recorded since)."""
        for event in events:
            to = event.data.get("to") if event.kind == "state" and event.machine else None
            if to:
                firsts = self._firsts.setdefault(event.machine, {})
                if to not in firsts:
                    firsts[to] = event.time
                    self._versions[event.machine] = self._versions.get(event.machine, 0) + 1

    @property
    def versions(self) -> Mapping[str, int]:
        """Per machine id, a number that grows whenever what first_entry answers for the
        machine may have changed (absent: 0)."""
        return self._versions

    def first_entry(self, machine: Machine, states: Iterable[MachineState]) -> float | None:
        """When the machine first entered any of states; its state_since when it is in one of
        them and the history has no record (e.g. pruned)."""
        return self.first_entry_of(machine, frozenset(s.value for s in states))

    def first_entry_of(self, machine: Machine, wanted: AbstractSet[str]) -> float | None:
        """first_entry with the states given by value, for callers that ask for the same
        states of every machine of a large cluster (the status) and build the set once."""
        found = next((t for to, t in self._firsts.get(machine.id, {}).items() if to in wanted),
                     None)
        if found is None and machine.state.value in wanted:
            return machine.state_since
        return found


def current_run(spec: ClusterSpec, machine: Machine) -> list[Entry]:
    """The items of the machine's current state's phase (runs.phase_run), as the status
    counts them: in Reconfigure, as versioned for the manager list it reconfigures for
    (Machine.managers), which is what its agent reports applied."""
    phase = PHASE_OF_STATE.get(machine.state)
    return phase_run(spec, machine, phase, machine.managers) if phase is not None else []


def item_states(spec: ClusterSpec, machine: Machine) -> list[tuple[str, str, int]]:
    """Each item of the machine's current phase in order, with where it stands (applied,
    running, failed or pending) and the attempt its agent last reported (0: none): what
    `machines get` lists under the counts."""
    progress = machine.progress
    states = []
    for item, fingerprint in current_run(spec, machine):
        if fingerprint in machine.applied:
            states.append((item.name, "applied", 0))
        elif (progress is not None and progress.item == item.name
              and progress.status in ("running", "failed")):
            states.append((item.name, progress.status, progress.attempt))
        else:
            states.append((item.name, "pending", 0))
    return states


def machine_step(spec: ClusterSpec | None, machine: Machine, now: float) -> MachineStep:
    step = _item_step(spec, machine, now)
    wait = node_wait(spec, machine, now) if spec is not None and step.status == "done" else None
    return step if wait is None else _waiting_for_node(step, wait)


def _waiting_for_node(step: MachineStep, wait: NodeWait) -> MachineStep:
    """A machine whose deploy items are done waits for its Node: failing once it has waited
    past settings.kubernetes.nodeReadyTimeoutSeconds, and still waiting."""
    failing = wait.late_for is not None
    return replace(step, status="failed" if failing else "waiting", node=wait.text,
                   node_waiting=wait.waited, failing_for=wait.late_for,
                   error=f"{wait.text} ({wait.waited:.0f}s); still waiting" if failing else "")


def _item_step(spec: ClusterSpec | None, machine: Machine, now: float) -> MachineStep:
    phase = PHASE_OF_STATE.get(machine.state) if machine.role else None
    items = current_run(spec, machine) if spec is not None else []
    names = [item.name for item, _ in items]
    pending = [item.name for item, fingerprint in items if fingerprint not in machine.applied]
    progress = machine.progress
    state_elapsed = max(0.0, now - machine.state_since)
    active = (progress is not None and progress.status in ("running", "failed")
              and progress.item in pending)
    if phase is None:
        status: StepStatus | None = None
        item = None
    elif active and progress is not None:
        status, item = ("running" if progress.status == "running" else "failed"), progress.item
    elif pending:
        status, item = "waiting", pending[0]
    else:
        status, item = "done", None
    failed = active and progress is not None and progress.status == "failed"
    failing_since = progress.failing_since if active and progress is not None else None
    return MachineStep(
        phase=phase,
        done=len(items) - len(pending),
        total=len(items),
        index=names.index(item) + 1 if item else 0,
        item=item,
        attempt=progress.attempt if active and progress is not None else 0,
        status=status,
        state_elapsed=state_elapsed,
        item_elapsed=max(0.0, now - progress.updated_at)
        if status == "running" and progress is not None else None,
        failing_for=max(0.0, now - failing_since) if failing_since is not None else None,
        next_retry_in=max(0.0, progress.next_retry_at - now)
        if failed and progress is not None and progress.next_retry_at is not None else None,
        error=progress.error if failed and progress is not None else "",
        gave_up=failed and progress is not None and progress.gave_up,
    )


def failure(spec: ClusterSpec, machine: Machine, now: float) -> tuple[float, str] | None:
    """Since when, and how, the machine's current item fails; None when it does not."""
    step = machine_step(spec, machine, now)
    if step.failing_for is None:
        return None
    if step.node:
        return now - step.failing_for, f"{machine.hostname}: {step.error}"
    if step.gave_up and step.item is not None:
        return now - step.failing_for, gave_up_text(machine.hostname, step.item, step.attempt,
                                                    step.error)
    return now - step.failing_for, (f"{machine.hostname}: {step.item} failing "
                                    f"(attempt {step.attempt}): {step.error}".rstrip(": "))


def retry_remedy(hostname: str) -> str:
    """What the operator does about an item its agent gave up on: mend it, have it run again."""
    return f"fix the cause, then `coordinator machines retry {hostname}`"


def after_attempts(attempts: int) -> str:
    return f"after {attempts} attempt{'' if attempts == 1 else 's'}"


def gave_up_text(hostname: str, item: str, attempts: int, error: str) -> str:
    """An item its agent gave up on, as the status says it: after how many attempts, the last
    error (as reported: redacted by the agent, masked by the coordinator) and the remedy."""
    return (f"{hostname}: its agent gave up on {item} {after_attempts(attempts)}"
            + (f": {error}" if error else "") + f"; {retry_remedy(hostname)}")
