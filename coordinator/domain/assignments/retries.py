"""An item its agent gave up on, and the operator's retry of it (`coordinator machines retry`).

Who knows what: the agent gives up, the coordinator records it, the operator retries.
- The agent alone counts an item's attempts (they go on while the coordinator is away, and
  start afresh when the agent restarts), so it alone knows the last one was its last: its
  final failed report says so (ItemReport.gave_up), and the coordinator keeps that in the
  machine's progress (ItemProgress.gave_up) rather than guess it from a count or a silence.
  Every view reads it from there: the step (steps.py), the stages, the events.
- A retry is a count on the machine (Machine.retries) that its assignment carries: a new
  count changes what the agent must do (its work key) and a new generation wakes its
  long-poll, so it starts the phase again (the journal skips what is applied) and the item
  with a fresh attempt budget. A count, not a flag to clear, because the agent needs nothing
  acknowledged: a lost answer, a restarted coordinator or a second replica all hand it the
  same count, and it runs the item again once per count it has not seen.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.model import ClusterSpec, Machine
from coordinator.domain.rollout.steps import machine_step


def retried(spec: ClusterSpec, machine: Machine, now: float) -> Change:
    """`machines retry` as one change: the machine with its given-up item ordered to run
    again (a new generation: its agent is woken) and the event saying so. Raises Conflict
    when its status shows no item given up: there is nothing to retry (an item still failing
    is retried by its agent)."""
    step = machine_step(spec, machine, now)
    progress = machine.progress
    # A Ready machine's progress is its post-deploy step's or its mint or revoke job's.
    shown = step.gave_up or step.phase is None
    if progress is None or not progress.gave_up or not shown:
        doing = (f"its agent still retries {step.item} (attempt {step.attempt})"
                 if step.status == "failed" else "no item was given up")
        raise Conflict(f"{machine.hostname}: nothing to retry: {doing}")
    updated = replace(machine, retries=machine.retries + 1, generation=machine.generation + 1,
                      progress=replace(progress, gave_up=False, next_retry_at=now))
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "retry", f"{machine.hostname}: the operator retries "
        f"{progress.item}, which its agent gave up on after {progress.attempt} attempts (retry "
        f"{updated.retries})", updated,
        {"item": progress.item, "attempts": progress.attempt, "retries": updated.retries})],
        wake=[machine.id], kick=True)
