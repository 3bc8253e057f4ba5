"""An item its agent gave up on (retry.maxAttempts), without a store: the report that says so,
what the status and the history read, and the operator's retry."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from pydantic import ValidationError

from coordinator.domain.assignments.reports import fold_report
from coordinator.domain.assignments.retries import retried
from coordinator.domain.errors import Conflict
from coordinator.domain.model import ItemProgress, Machine, MachineState
from coordinator.domain.views.status import History, machine_step, post_deploy, stages
from nodeagent.wire.protocol import ItemReport, StateItem
from tests.support.builders import at_release, cluster, decided, items, machine

SPEC = cluster(worker=items("prepare", 2))
FIRST = SPEC.machine_types.worker[0]


def report(status: str, attempt: int, **fields: object) -> ItemReport:
    return ItemReport(item=FIRST.name, fingerprint=FIRST.fingerprint(), phase=FIRST.phase,
                      status=status, attempt=attempt, started_at=1.0, **fields)


def given_up(attempts: int = 3) -> Machine:
    """w1 after its agent's reports of FIRST failing attempts times, the last one final."""
    w1 = replace(machine("w1", state=MachineState.PREPARE), state_since=5.0)
    for attempt in range(1, attempts + 1):
        last = attempt == attempts
        w1 = decided(fold_report(SPEC, (), w1, report("running", attempt), now=10.0 * attempt)).machine
        w1 = decided(fold_report(SPEC, (), w1, report(
            "failed", attempt, exit_code=2, error="exit status 2: no /etc/app.conf",
            next_retry_at=None if last else 10.0 * attempt + 5, gave_up=last),
            now=10.0 * attempt + 1)).machine
    return w1


def test_the_last_report_says_the_agent_gave_up_and_every_view_says_so_with_the_remedy() -> None:
    w1 = given_up()
    step = machine_step(SPEC, w1, now=100.0)
    assert (step.status, step.gave_up, step.attempt, step.next_retry_in) == ("failed", True, 3, None)
    assert step.failing_for == 89.0  # since the first failure
    prepared = {s.name: s for s in stages(SPEC, 0.0, [w1], History([]), now=100.0)}["prepared"]
    assert prepared.state == "failing"
    assert prepared.message.endswith(
        "w1: its agent gave up on prepare-0 after 3 attempts: exit status 2: no /etc/app.conf; "
        "fix the cause, then `coordinator machines retry w1`")
    last = decided(fold_report(SPEC, (), given_up(2), report(
        "failed", 3, error="exit status 2", gave_up=True), now=50.0)).events[-1]
    assert last.message == ("prepare item prepare-0 failed (attempt 3): exit status 2; w1: its "
                            "agent gave up on prepare-0 after 3 attempts; fix the cause, then "
                            "`coordinator machines retry w1`")
    assert last.data["gave_up"] is True


def test_a_failure_the_agent_still_retries_is_not_given_up() -> None:
    w1 = decided(fold_report(SPEC, (), machine("w1", state=MachineState.PREPARE), report(
        "failed", 1, error="exit status 2", next_retry_at=20.0), now=11.0)).machine
    step = machine_step(SPEC, w1, now=12.0)
    assert (step.status, step.gave_up, step.next_retry_in) == ("failed", False, 8.0)


def test_a_retry_counts_on_the_machine_wakes_its_agent_and_is_recorded() -> None:
    w1 = given_up()
    change = retried(SPEC, w1, now=200.0)
    [again], [recorded] = change.machines, change.events
    assert (again.retries, again.generation) == (1, w1.generation + 1)
    assert (list(change.wake), change.kick) == ([w1.id], True)
    step = machine_step(SPEC, again, now=200.0)
    assert (step.gave_up, step.next_retry_in) == (False, 0.0)  # retrying now
    assert recorded.kind == "retry" and recorded.message == (
        "w1: the operator retries prepare-0, which its agent gave up on after 3 attempts "
        "(retry 1)")
    # The agent's next report is its first attempt again: running, then as it goes.
    running = decided(fold_report(SPEC, (), again, report("running", 1), now=201.0)).machine
    assert machine_step(SPEC, running, now=202.0).status == "running"
    with pytest.raises(Conflict, match="w1: nothing to retry: no item was given up"):
        retried(SPEC, running, now=203.0)


def test_nothing_to_retry_says_why() -> None:
    with pytest.raises(Conflict, match=r"^w1: nothing to retry: no item was given up$"):
        retried(SPEC, machine("w1", state=MachineState.PREPARE), now=1.0)
    retrying = decided(fold_report(SPEC, (), machine("w1", state=MachineState.PREPARE), report(
        "failed", 2, error="exit status 2", next_retry_at=20.0), now=11.0)).machine
    with pytest.raises(Conflict, match="its agent still retries prepare-0 \\(attempt 2\\)"):
        retried(SPEC, retrying, now=12.0)
    # An item given up on that the current spec no longer runs is not shown, nor retried.
    other = cluster(worker=items("prepare", 1, "new-"))
    with pytest.raises(Conflict, match="no item was given up"):
        retried(other, given_up(), now=100.0)


def test_a_post_deploy_item_given_up_on_says_so() -> None:
    step = StateItem.model_validate({"name": "helm", "phase": "postdeploy",
                                     "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[step])
    m1 = replace(at_release(spec, machine("m1", "manager", state=MachineState.READY)),
                 deploy_order=1)
    w1 = at_release(spec, machine("w1", state=MachineState.READY))
    m1 = decided(fold_report(spec, (), m1, ItemReport(
        item="helm", fingerprint=step.fingerprint(), phase="postdeploy", status="failed",
        attempt=5, started_at=1.0, error="exit status 1", gave_up=True), now=10.0)).machine
    assert post_deploy(spec, [m1, w1]).failing == (
        "m1: its agent gave up on helm after 5 attempts: exit status 1; fix the cause, then "
        "`coordinator machines retry m1`")
    assert retried(spec, m1, now=20.0).machines[0].retries == 1  # a Ready machine's step, retried too


def test_only_a_failed_report_gives_up() -> None:
    with pytest.raises(ValidationError, match="gave_up: only a failed report gives up"):
        report("succeeded", 1, gave_up=True)


# The operator's retry (`coordinator machines retry`), as a table: what became of w1's item,
# and what the operator is told ("" means the item runs again, with a fresh attempt budget).
def still_retrying() -> Machine:
    return decided(fold_report(SPEC, (), machine("w1", state=MachineState.PREPARE), report(
        "failed", 1, error="exit status 2", next_retry_at=20.0), now=11.0)).machine


def retried_once() -> Machine:
    return retried(SPEC, given_up(), now=200.0).machines[0]


RETRIES = [
    pytest.param(given_up, "", id="an item its agent gave up on runs again"),
    pytest.param(lambda: given_up(2), "",
                 id="given up after fewer attempts, the same"),
    pytest.param(still_retrying, "its agent still retries prepare-0 (attempt 1)",
                 id="an item its agent still retries: nothing to retry"),
    pytest.param(retried_once, "its agent still retries prepare-0 (attempt 3)",
                 id="a retry already ordered: its agent is on it"),
    pytest.param(lambda: machine("w1", state=MachineState.PREPARE), "no item was given up",
                 id="a machine that never failed"),
    pytest.param(lambda: replace(machine("w1", state=MachineState.READY), progress=ItemProgress(
        "mint-token", 2, "failed", "exit 1", next_retry_at=310.0)), "no item was given up",
                 id="a Ready machine's job its agent still retries"),
    pytest.param(lambda: replace(machine("w1", state=MachineState.READY), progress=ItemProgress(
        "mint-token", 3, "failed", "exit 1", gave_up=True)), "",
                 id="a Ready machine's job its agent gave up on runs again"),
]


@pytest.mark.parametrize(("before", "told"), RETRIES)
def test_retry_table(before: Callable[[], Machine], told: str) -> None:
    w1 = before()
    if told:
        with pytest.raises(Conflict, match=f"w1: nothing to retry: {re.escape(told)}"):
            retried(SPEC, w1, now=300.0)
        return
    change = retried(SPEC, w1, now=300.0)
    (again,), (recorded,) = change.machines, change.events
    assert list(change.wake) == [w1.id] and change.kick
    assert (again.retries, again.generation) == (w1.retries + 1, w1.generation + 1)
    assert recorded.kind == "retry" and recorded.message.startswith(
        f"w1: the operator retries {w1.progress.item}, which its agent gave up on")  # type: ignore[union-attr]
