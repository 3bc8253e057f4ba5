"""Whether a machine's last precheck report lets it run as a role.

The node checks the CPU and memory minimums of the role in its agent's config, which need
not be the role it is approved as. So those minimums are judged here again, for the role at
hand, from the values the node measured and with the node's own definition
(nodeagent/wire/minimums.py); every other hard check counts as the node judged it. A report from
after Prepare counts only its Kubernetes prerequisites (domain/rollout/prerequisites.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.wire.contract import Role
from nodeagent.wire.minimums import MINIMUMS
from nodeagent.wire.protocol import CheckResult, PrecheckReport, Stage, Status

_JUDGED_HERE = frozenset(m.check for m in MINIMUMS)


@dataclass(frozen=True)
class Fitness:
    """The verdict on one role: each problem is `check: why`, as the operator reads it."""

    role: Role | None  # the role judged; None only when the report is unreadable
    checked_as: Role | None  # the role whose minimums the node checked
    failed: tuple[str, ...] = ()  # hard checks the node failed, as it judged them
    short: tuple[str, ...] = ()  # minimums of `role` the measured values do not meet
    unmeasured: tuple[str, ...] = ()  # minimums of `role` the report gives no value for

    @property
    def problems(self) -> list[str]:
        return [*self.failed, *self.short, *self.unmeasured]


def fitness(precheck: Mapping[str, Any], role: Role | None) -> Fitness:
    """The verdict of a stored precheck report on role (None: the role the node checked)."""
    try:
        report = PrecheckReport.model_validate(precheck)
    except ValueError:
        return Fitness(role, None, failed=("precheck report missing or invalid",))
    judged = role or report.role
    if report.prepared:  # after Prepare: approved already, only its prerequisites count
        return Fitness(judged, report.role, tuple(
            f"{c.name}: {c.message}" for c in report.checks
            if c.status is Status.FAIL and c.stage is Stage.PREPARE))
    failed = [f"{c.name}: {c.message}" for c in report.checks
              if c.status is Status.FAIL and c.name not in _JUDGED_HERE]
    short, unmeasured = [], []
    results = {c.name: c for c in report.checks}
    for minimum in MINIMUMS:
        result = results.get(minimum.check)
        if result is not None and result.ignored:
            continue  # the node was told to ignore this check: so is the coordinator
        measured = _measured(result, minimum.key)
        if measured is not None:
            shortfall = minimum.shortfall(measured, judged)
            short += [f"{minimum.check}: {shortfall}"] if shortfall else []
        elif judged != report.role:
            unmeasured.append(f"{minimum.check}: not measured (its report, checked for a "
                              f"{report.role}, carries no {minimum.key!r} value)")
        elif result is not None and result.status is Status.FAIL:
            failed.append(f"{result.name}: {result.message}")  # the node's own verdict
    return Fitness(judged, report.role, tuple(failed), tuple(short), tuple(unmeasured))


def to_be_prepared(precheck: Mapping[str, Any]) -> list[str]:
    """`check: why` of each Kubernetes prerequisite the report defers: failing before Prepare,
    which sets it; checked again after Prepare (domain/rollout/prerequisites.py)."""
    try:
        report = PrecheckReport.model_validate(precheck)
    except ValueError:
        return []
    return [f"{c.name}: {c.message}" for c in report.checks if c.deferred]


def _measured(result: CheckResult | None, key: str) -> int | None:
    """The value the check reports under key; None when the report has none (the check could
    not read it, or the agent that sent the report does not report it)."""
    value = result.data.get(key) if result is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fits(precheck: Mapping[str, Any], role: Role) -> bool:
    """Whether nothing in the report stops the machine from running as role."""
    return not fitness(precheck, role).problems

