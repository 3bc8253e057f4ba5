from __future__ import annotations

import asyncio
import time

import pytest

from nodeagent.prechecks import NAMES
from nodeagent.prechecks.base import Check, CheckContext, Outcome, failed, passed, skipped, warned
from nodeagent.prechecks.runner import resolve_ignores, run_checks
from nodeagent.wire.protocol import CheckResult, PrecheckReport, Severity, Status
from tests.support.roots import MakeContext

HARD, SOFT = Severity.HARD, Severity.SOFT


def check(name: str, outcome: Outcome, severity: Severity = HARD, delay: float = 0.0,
          timeout: float | None = None) -> Check:
    async def run(ctx: CheckContext) -> Outcome:
        await asyncio.sleep(delay)
        return outcome

    if timeout is None:
        return Check(name, severity, f"the {name} check", run)
    return Check(name, severity, f"the {name} check", run, timeout=lambda config: timeout)


def by_name(report: PrecheckReport) -> dict[str, CheckResult]:
    return {c.name: c for c in report.checks}


async def test_results_keep_the_suite_order_and_the_outcome(make_ctx: MakeContext) -> None:
    checks = [
        check("slowish", passed("fine", answer=42), delay=0.05),
        check("quick", warned("hmm", "look at it")),
    ]
    report = await run_checks(checks, make_ctx("manager"))
    assert [c.name for c in report.checks] == ["slowish", "quick"]
    first, second = report.checks
    assert (first.status, first.message, first.data, first.severity) == (
        Status.PASS, "fine", {"answer": 42}, HARD
    )
    assert first.duration >= 0.05
    assert (second.status, second.remedy) == (Status.WARN, "look at it")
    assert report.role == "manager"
    assert report.ok is True


async def test_checks_run_concurrently(make_ctx: MakeContext) -> None:
    checks = [check(f"c{i}", passed("ok"), delay=0.3) for i in range(5)]
    started = time.monotonic()
    report = await run_checks(checks, make_ctx())
    assert time.monotonic() - started < 1.0
    assert report.summary.passed == 5


async def test_slow_check_times_out_while_the_others_finish(make_ctx: MakeContext) -> None:
    checks = [
        check("hangs", passed("never"), delay=30, timeout=0.2),
        check("fast", passed("ok")),
        check("also-fast", skipped("nothing to do"), delay=0.01),
    ]
    started = time.monotonic()
    report = await run_checks(checks, make_ctx())
    elapsed = time.monotonic() - started
    assert elapsed < 1.5
    results = by_name(report)
    assert results["hangs"].status is Status.FAIL
    assert results["hangs"].message == "did not finish within 0.2s"
    assert results["hangs"].remedy.startswith("find what blocks this check")
    assert results["fast"].status is Status.PASS
    assert results["fast"].duration < 0.2
    assert results["also-fast"].status is Status.SKIP
    assert report.ok is False


async def test_default_timeout_comes_from_the_config(make_ctx: MakeContext) -> None:
    report = await run_checks([check("hangs", passed("never"), delay=30)],
                              make_ctx(thresholds={"checkTimeout": 0.1}))
    assert report.checks[0].message == "did not finish within 0.1s"


async def test_crashing_check_fails_without_hiding_the_others(make_ctx: MakeContext) -> None:
    async def crash(ctx: CheckContext) -> Outcome:
        raise KeyError("MemTotal")

    checks = [Check("crashes", HARD, "a broken check", crash), check("fine", passed("ok"))]
    report = await run_checks(checks, make_ctx())
    results = by_name(report)
    assert results["crashes"].status is Status.FAIL
    assert results["crashes"].message == "check crashed: KeyError: 'MemTotal'"
    assert results["crashes"].remedy == "report this as a nodeagent bug"
    assert results["fine"].status is Status.PASS
    assert report.ok is False


async def test_soft_failure_is_a_warning(make_ctx: MakeContext) -> None:
    report = await run_checks([check("swap", failed("swap on", "swapoff -a"), SOFT)], make_ctx())
    result = report.checks[0]
    assert result.status is Status.WARN
    assert result.ignored is False
    assert result.remedy == "swapoff -a"
    assert report.ok is True
    assert report.summary.warned == 1


async def test_ignored_failure_is_a_warning_marked_ignored(make_ctx: MakeContext) -> None:
    checks = [check("a", failed("broken a", "fix a")), check("b", failed("broken b", "fix b")),
              check("c", passed("ok"))]
    report = await run_checks(checks, make_ctx(), resolve_ignores(["a"], ["a", "b", "c"]))
    results = by_name(report)
    assert (results["a"].status, results["a"].ignored) == (Status.WARN, True)
    assert (results["b"].status, results["b"].ignored) == (Status.FAIL, False)
    assert (results["c"].status, results["c"].ignored) == (Status.PASS, False)
    assert report.ok is False

    everything = await run_checks(checks, make_ctx(), resolve_ignores(["all"], ["a", "b", "c"]))
    assert [(c.status, c.ignored) for c in everything.checks] == [
        (Status.WARN, True), (Status.WARN, True), (Status.PASS, False)
    ]
    assert everything.ok is True


async def test_ignoring_a_passing_or_warning_check_changes_nothing(make_ctx: MakeContext) -> None:
    checks = [check("a", passed("ok")), check("b", warned("meh")), check("s", failed("x", "y"), SOFT)]
    report = await run_checks(checks, make_ctx(), frozenset({"a", "b", "s"}))
    assert [(c.status, c.ignored) for c in report.checks] == [
        (Status.PASS, False), (Status.WARN, False), (Status.WARN, False)
    ]


def test_resolve_ignores_accepts_known_names_and_all() -> None:
    assert resolve_ignores([" swap", "", "cpu "], NAMES) == {"swap", "cpu"}
    assert resolve_ignores(["all"], NAMES) == set(NAMES)
    assert resolve_ignores([], NAMES) == frozenset()


def test_resolve_ignores_names_every_unknown_check() -> None:
    with pytest.raises(ValueError) as caught:
        resolve_ignores(["swap", "nosuchcheck", "dns"], NAMES)
    message = str(caught.value)
    assert message.startswith("unknown check name(s): dns, nosuchcheck; known: ")
    assert "dns-port" in message.split("known: ")[1]


async def test_summary_counts_each_status(make_ctx: MakeContext) -> None:
    checks = [
        check("p1", passed("ok")), check("p2", passed("ok")),
        check("w", warned("meh")), check("soft", failed("x", "y"), SOFT),
        check("f", failed("x", "y")), check("s", skipped("n/a")),
    ]
    report = await run_checks(checks, make_ctx())
    assert report.summary.model_dump() == {"passed": 2, "warned": 2, "failed": 1, "skipped": 1}
    assert report.ok is False
    assert report.duration >= 0


async def test_shared_probe_runs_once_for_every_check(make_ctx: MakeContext) -> None:
    calls = 0

    async def probe() -> list[str]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return ["answer"]

    async def uses_probe(ctx: CheckContext) -> Outcome:
        return passed(f"got {await ctx.shared('probe', probe)}")

    checks = [Check(f"c{i}", HARD, "shares a probe", uses_probe) for i in range(3)]
    report = await run_checks(checks, make_ctx())
    assert calls == 1
    assert {c.message for c in report.checks} == {"got ['answer']"}


async def test_a_timed_out_check_does_not_cancel_a_probe_others_wait_for(
    make_ctx: MakeContext,
) -> None:
    async def probe() -> str:
        await asyncio.sleep(0.3)
        return "slow answer"

    async def uses_probe(ctx: CheckContext) -> Outcome:
        return passed(await ctx.shared("probe", probe))

    checks = [
        Check("impatient", HARD, "gives up early", uses_probe, timeout=lambda config: 0.05),
        Check("patient", HARD, "waits", uses_probe),
    ]
    results = by_name(await run_checks(checks, make_ctx()))
    assert results["impatient"].message == "did not finish within 0.05s"
    assert (results["patient"].status, results["patient"].message) == (Status.PASS, "slow answer")
