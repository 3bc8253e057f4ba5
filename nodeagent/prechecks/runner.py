"""Run checks concurrently, each bounded by its own timeout, and fold them into a report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence

from nodeagent.prechecks.base import Check, CheckContext, Outcome
from nodeagent.wire.protocol import CheckResult, PrecheckReport, Severity, Stage, Status, Summary

IGNORE_ALL = "all"


def resolve_ignores(requested: Iterable[str], known: Iterable[str]) -> frozenset[str]:
    """Validate --ignore names; 'all' ignores every check. Raises ValueError naming unknowns."""
    names = {n.strip() for n in requested if n.strip()}
    known_set = set(known)
    if IGNORE_ALL in names:
        return frozenset(known_set)
    unknown = sorted(names - known_set)
    if unknown:
        raise ValueError(
            f"unknown check name(s): {', '.join(unknown)}; known: {', '.join(sorted(known_set))}"
        )
    return frozenset(names)


def grade(check: Check, outcome: Outcome, duration: float, ignored: frozenset[str],
          prepared: bool = False) -> CheckResult:
    """Apply severity, stage and --ignore: soft failures, a prerequisite's failure before
    Prepare (deferred: Prepare sets it) and ignored failures become warnings."""
    status = outcome.status
    was_ignored = deferred = False
    if status is Status.FAIL and check.severity is Severity.SOFT:
        status = Status.WARN
    elif status is Status.FAIL and check.stage is Stage.PREPARE and not prepared:
        status, deferred = Status.WARN, True
    elif status is Status.FAIL and check.name in ignored:
        status, was_ignored = Status.WARN, True
    return CheckResult(
        name=check.name,
        severity=check.severity,
        status=status,
        message=outcome.message,
        remedy=outcome.remedy,
        data=outcome.data,
        duration=round(duration, 4),
        ignored=was_ignored,
        stage=check.stage,
        deferred=deferred,
    )


async def _run_one(check: Check, ctx: CheckContext) -> tuple[Outcome, float]:
    started = time.monotonic()
    limit = check.timeout(ctx.config)
    try:
        outcome = await asyncio.wait_for(check.run(ctx), limit)
    except TimeoutError:
        outcome = Outcome(
            Status.FAIL,
            f"did not finish within {limit:g}s",
            "find what blocks this check (an unreachable server, a hung command) and retry",
        )
    except Exception as exc:  # a broken check must not hide the others' results
        outcome = Outcome(
            Status.FAIL,
            f"check crashed: {type(exc).__name__}: {exc}",
            "report this as a nodeagent bug",
        )
    return outcome, time.monotonic() - started


def summarize(results: Sequence[CheckResult]) -> Summary:
    count = {s: sum(1 for r in results if r.status is s) for s in Status}
    return Summary(
        passed=count[Status.PASS],
        warned=count[Status.WARN],
        failed=count[Status.FAIL],
        skipped=count[Status.SKIP],
    )


async def run_checks(
    checks: Sequence[Check], ctx: CheckContext, ignored: frozenset[str] = frozenset(),
    prepared: bool = False,
) -> PrecheckReport:
    """Every check; prepared: the run after the cluster's prepare items, where a failing
    Kubernetes prerequisite fails (before them it is deferred)."""
    ctx.ignored = ignored
    started_at = ctx.host.now()
    started = time.monotonic()
    outcomes = await asyncio.gather(*(_run_one(c, ctx) for c in checks))
    results = [grade(c, o, d, ignored, prepared)
               for c, (o, d) in zip(checks, outcomes, strict=True)]
    return PrecheckReport(
        hostname=ctx.host.kernel_hostname(),
        role=ctx.role,
        started_at=started_at,
        duration=round(time.monotonic() - started, 4),
        ok=not any(r.status is Status.FAIL for r in results),
        prepared=prepared,
        summary=summarize(results),
        checks=results,
    )
