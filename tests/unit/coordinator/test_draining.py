"""A drain's steps decided (domain/nodes/draining.py): the eviction policy over the API server's
answers, how a drain ended, and the DrainStatus each step of the drainer records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.model import DrainSettings, DrainStage, DrainStatus, Machine, MachineState
from coordinator.domain.nodes.drain import PodPlan, PodRef
from coordinator.domain.nodes.draining import (
    MAX_RETRY_SECONDS,
    DrainResult,
    awaiting_ready,
    begun,
    blocked_at_once,
    drain_answered,
    drain_outcome,
    ended,
    eviction_step,
    late,
    recorded,
    step_failed,
    uncordoned,
)
from tests.support.builders import KUBE_ACCESS, cluster, items, machine

S, D = MachineState, DrainStage
WEB, DB = PodRef("default", "web-1", "u1"), PodRef("default", "db-0", "u2")
BLOCK = DrainSettings(eviction_retry_seconds=5.0)
FORCE_AT_TIMEOUT = DrainSettings(eviction_retry_seconds=5.0, on_timeout="force")
BUDGET = "default/web"


@pytest.mark.parametrize(
    ("evicted", "budget", "failures", "settings", "force", "remaining", "jitter", "step"), [
        (True, None, 0, BLOCK, False, 60, 0.0, ("evicted", 0.0)),
        (False, BUDGET, 1, BLOCK, False, 60, 1.0, ("retry", 5.0)),
        (False, BUDGET, 1, BLOCK, False, 60, 0.0, ("retry", 2.5)),
        (False, BUDGET, 3, BLOCK, False, 60, 1.0, ("retry", 20.0)),
        (False, BUDGET, 9, BLOCK, False, 600, 1.0, ("retry", MAX_RETRY_SECONDS)),
        (False, BUDGET, 3, BLOCK, False, 4, 1.0, ("retry", 4.0)),
        (False, None, 1, BLOCK, False, 60, 1.0, ("retry", 5.0)),
        (False, BUDGET, 1, BLOCK, True, 60, 1.0, ("delete", 0.0)),
        (False, None, 1, BLOCK, True, 60, 1.0, ("retry", 5.0)),
        (False, BUDGET, 4, BLOCK, False, 0, 1.0, ("give-up", 0.0)),
        (False, BUDGET, 4, FORCE_AT_TIMEOUT, False, 0, 1.0, ("delete", 0.0)),
        (False, None, 4, FORCE_AT_TIMEOUT, False, 0, 1.0, ("give-up", 0.0)),
        (False, BUDGET, 4, FORCE_AT_TIMEOUT, False, 10, 1.0, ("retry", 10.0)),
    ], ids=["evicted", "budget-first-wait", "jitter-halves", "doubles", "capped",
            "never-past-the-deadline", "error-retried", "operator-force-deletes",
            "force-does-not-delete-for-an-error", "deadline-blocks", "deadline-forces",
            "deadline-forces-only-budgets", "force-waits-for-the-deadline"])
def test_the_eviction_policy(evicted: bool, budget: str | None, failures: int,
                             settings: DrainSettings, force: bool, remaining: float,
                             jitter: float, step: tuple[str, float]) -> None:
    decided = eviction_step(evicted, budget, failures, settings, force, remaining, jitter)
    assert (decided.action, decided.wait) == step


@pytest.mark.parametrize(("plan", "force", "message"), [
    (PodPlan(evict=[WEB]), False, None),
    (PodPlan(blocking=[(DB, "uses emptyDir data (drain.deleteEmptyDirData)")]), False,
     "cannot evict 1 pods: default/db-0: uses emptyDir data (drain.deleteEmptyDirData)"),
    (PodPlan(blocking=[(DB, "no controller manages it (drain.force)")]), True, None),
], ids=["nothing-blocks", "blocked-names-pod-and-setting", "operator-force"])
def test_pods_the_settings_keep_block_the_drain_at_once(plan: PodPlan, force: bool,
                                                        message: str | None) -> None:
    blocked = blocked_at_once(plan, force)
    assert (blocked and blocked.message) == message
    assert blocked is None or blocked.blocking_pods == ("default/db-0",)


@pytest.mark.parametrize(("gone", "waits", "left", "result"), [
    ([WEB, DB], {}, [], DrainResult(True, "2 pods evicted; 1 skipped (DaemonSet and mirror pods)",
                                    2)),
    ([DB], {WEB: f"budget {BUDGET}"}, [],
     DrainResult(False, f"drain timed out: default/web-1 (budget {BUDGET})", 1,
                 ("default/web-1",), (BUDGET,))),
    ([WEB, DB], {}, [DB],
     DrainResult(False, "drain timed out: still terminating: default/db-0", 1, ("default/db-0",))),
    ([DB], {WEB: "500 Internal Server Error"}, [DB],
     DrainResult(False, "drain timed out: default/web-1 (500 Internal Server Error); still "
                 "terminating: default/db-0", 0, ("default/web-1", "default/db-0"))),
], ids=["drained", "a-budget-in-the-way", "still-terminating", "both"])
def test_how_a_drain_ended(gone: list[PodRef], waits: dict[PodRef, str], left: list[PodRef],
                           result: DrainResult) -> None:
    plan = PodPlan(evict=[WEB, DB], skipped=[(PodRef("kube-system", "proxy", "u3"), "ds")])
    budgets = {p: BUDGET for p in waits if waits[p].startswith("budget")}
    assert drain_outcome(plan, gone, waits, budgets, left) == result


ATTEMPT = DrainStatus(D.DRAINING, started_at=100.0, attempt=2, force=True, held=True)


@pytest.mark.parametrize(("result", "found", "stage", "message", "end"), [
    (DrainResult(True, "3 pods evicted", 3), True, D.DRAINED, "w1 drained: 3 pods evicted",
     "forced"),
    (DrainResult(False, "drain timed out: x"), True, D.BLOCKED,
     "w1 drain blocked (still held and cordoned): drain timed out: x", "timed-out"),
    (DrainResult(True, "no node registered"), False, D.SKIPPED, "w1: no node registered",
     "skipped"),
], ids=["drained", "blocked", "never-registered"])
def test_a_drain_s_last_status(result: DrainResult, found: bool, stage: DrainStage,
                               message: str, end: str) -> None:
    status, said, how = ended("w1", ATTEMPT, result, found)
    assert (status.stage, said, how) == (stage, message, end)
    assert (status.attempt, status.started_at, status.evicted) == (2, 100.0, result.evicted)


@pytest.mark.parametrize(("drain", "now", "status", "message"), [
    (None, 50.0, DrainStatus(D.DRAINING, started_at=50.0), "w1: cordon and drain"),
    (ATTEMPT, 130.0, ATTEMPT, "w1: draining (attempt 2; 570s of its timeout left)"),
    (ATTEMPT, 1000.0, ATTEMPT, "w1: draining (attempt 2; 0s of its timeout left)"),
], ids=["new", "resumed-keeps-its-deadline", "resumed-past-its-deadline"])
def test_a_drain_begins_or_goes_on(drain: DrainStatus | None, now: float, status: DrainStatus,
                                   message: str) -> None:
    assert begun(replace(machine("w1"), drain=drain), DrainSettings(), now) == (status, message)


SPEC = cluster(worker=items("upgrade", 1), **KUBE_ACCESS)
UNCORDONED = DrainStatus(D.UNCORDONED, started_at=0.0, uncordoned_at=100.0)


@pytest.mark.parametrize(("now", "status", "late_stage"), [
    (399.0, UNCORDONED, None),
    (400.0, UNCORDONED, D.NOT_READY),
    (900.0, replace(UNCORDONED, stage=D.NOT_READY), None),
], ids=["in-time", "late", "said-once"])
def test_a_node_late_to_be_ready_is_said_once(now: float, status: DrainStatus,
                                              late_stage: DrainStage | None) -> None:
    found = late(status, "w1.lab", 300, "False KubeletNotReady", now)
    assert (found and found.stage) == late_stage
    assert found is None or found.message == ("node w1.lab is not Ready 300s after the "
                                              "uncordon: False KubeletNotReady; still checking")


@pytest.mark.parametrize(("stored", "awaiting"), [
    (replace(machine("w1", state=S.UPGRADE), drain=UNCORDONED), True),
    (replace(machine("w1", state=S.UPGRADE), drain=replace(UNCORDONED, stage=D.NOT_READY)), True),
    (replace(machine("w1", state=S.UPGRADE), drain=replace(UNCORDONED, stage=D.NODE_READY)),
     False),
    (replace(machine("w1", state=S.UPGRADE), drain=replace(UNCORDONED, attempt=2)), False),
    (None, False),
], ids=["uncordoned", "not-ready", "ready", "another-attempt", "deleted"])
def test_a_ready_wait_goes_on_while_its_attempt_waits(stored: Machine | None,
                                                      awaiting: bool) -> None:
    assert awaiting_ready(stored, UNCORDONED) is awaiting


def upgrading(drain: DrainStatus | None, state: MachineState = S.UPGRADE) -> Machine:
    return replace(machine("w1", state=state), drain=drain, generation=7)


DRAINING = DrainStatus(D.DRAINING, started_at=10.0)


@pytest.mark.parametrize(("stored", "expected", "status", "generation"), [
    (upgrading(None), None, DRAINING, 7),
    (upgrading(DRAINING), DRAINING, replace(DRAINING, stage=D.DRAINED), 8),
    (upgrading(DRAINING), DRAINING, replace(DRAINING, message="waiting"), 7),
    (upgrading(replace(DRAINING, attempt=2)), DRAINING, replace(DRAINING, stage=D.DRAINED), None),
    (upgrading(DRAINING), None, DRAINING, None),
    (upgrading(DRAINING, S.READY), DRAINING, replace(DRAINING, stage=D.DRAINED), None),
    (upgrading(DRAINING, S.DELETING), DRAINING, replace(DRAINING, stage=D.DRAINED), 8),
    (None, DRAINING, DRAINING, None),
], ids=["first-step", "drained-lets-items-run", "note-only", "older-attempt", "no-drain-expected",
        "left-upgrade", "removal", "deleted"])
def test_a_drain_step_counts_only_on_its_own_attempt(
        stored: Machine | None, expected: DrainStatus | None, status: DrainStatus,
        generation: int | None) -> None:
    for message in (None, "w1: said"):
        change = recorded(SPEC, stored, expected, status, message, 500.0)
        assert (change.machines[0].generation if change.writes else None) == generation
        assert (list(change.wake), change.kick) == (([stored.id], True) if change.writes  # type: ignore[union-attr]
                                                    else ([], False))
        if change.writes:
            [written], events = change.machines, change.events
            assert written.drain == status
            assert [(e.kind, e.message, e.time) for e in events] == \
                ([("drain", message, 500.0)] if message else [])


def test_a_failed_node_step_keeps_since_when_it_fails() -> None:
    first = step_failed(UNCORDONED, "uncordon", "503 Service Unavailable", 200.0)
    again = step_failed(first, "uncordon", "timed out", 260.0)
    assert (again.message, again.step_error, again.step_error_since) == (
        "uncordon failed, retrying: timed out", "timed out", 200.0)
    done, said = uncordoned("w1", again, "w1.lab", "uncordoned node w1.lab", 300.0)
    assert (done.stage, done.step_error, done.step_error_since, done.uncordoned_at) == (
        D.UNCORDONED, "", None, 300.0)
    assert said == "w1: uncordoned node w1.lab"
    assert done.message == ("upgrade items applied; uncordoned node w1.lab; waiting for node "
                            "w1.lab to report Ready")


BLOCKED = DrainStatus(D.BLOCKED, started_at=10.0, attempt=1, blocking_pods=("default/web-1",))


@pytest.mark.parametrize(("answered", "action", "drain", "said", "refused"), [
    (upgrading(BLOCKED), "retry", DrainStatus(D.DRAINING, 500.0, 2), None, None),
    (upgrading(BLOCKED), "force", DrainStatus(D.DRAINING, 500.0, 2, force=True), None, None),
    (upgrading(BLOCKED), "skip", replace(BLOCKED, stage=D.SKIPPED),
     "drain skipped by the operator; upgrading with 1 pods left on the node", None),
    (upgrading(BLOCKED, S.DELETING), "skip", replace(BLOCKED, stage=D.SKIPPED),
     "drain skipped by the operator; resetting with 1 pods left on the node", None),
    (upgrading(None), "retry", DrainStatus(D.DRAINING, 500.0, 1), None, None),
    (upgrading(replace(BLOCKED, stage=D.DRAINED)), "retry", None, None,
     "w1: its drain is Drained, nothing to retry"),
    (upgrading(BLOCKED, S.READY), "skip", None, None, "w1 is Ready: it has no drain to skip"),
    (upgrading(None, S.DELETING), "force", None, None,
     "w1 is Deleting: it has no drain to force"),
], ids=["retry-new-attempt", "force-new-attempt", "skip-upgrade", "skip-removal",
        "not-begun-yet", "past-draining", "not-upgrading", "removal-without-drain"])
def test_an_operators_answer_to_a_drain_is_one_change_or_refused(
        answered: Machine, action: str, drain: DrainStatus | None, said: str | None,
        refused: str | None) -> None:
    """`upgrade retry|skip|force`: the machine's drain as answered, a new generation, the
    event, its agent woken and a pass asked for; else Conflict saying why."""
    if refused is not None:
        with pytest.raises(Conflict, match=refused):
            drain_answered(SPEC, answered, action, 500.0)
        return
    change = drain_answered(SPEC, answered, action, 500.0)
    [updated] = change.machines
    assert updated.drain == (drain if said is None else replace(drain, message=said))
    assert updated.generation == answered.generation + 1
    assert [(e.kind, e.data) for e in change.events] == [("drain", {"action": action})]
    assert (list(change.wake), change.kick) == ([answered.id], True)
