"""A precheck report as a table for the terminal (`nodeagent precheck`)."""

from __future__ import annotations

import textwrap

from nodeagent.wire.protocol import PrecheckReport, Status

_MARK = {Status.PASS: "pass", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}


def precheck_table(report: PrecheckReport, width: int = 100) -> str:
    name_w = max(len("CHECK"), *(len(c.name) for c in report.checks))
    indent = " " * (name_w + 10)
    lines = [f"{'CHECK':<{name_w}}  STATUS  MESSAGE"]
    for check in report.checks:
        status = _MARK[check.status] + ("*" if check.ignored else "^" if check.deferred else "")
        message = textwrap.fill(
            check.message, width=max(width, name_w + 40), initial_indent=indent,
            subsequent_indent=indent,
        ).lstrip()
        lines.append(f"{check.name:<{name_w}}  {status:<6}  {message}")
        if check.status in (Status.FAIL, Status.WARN) and check.remedy:
            lines.append(textwrap.fill(
                "remedy: " + check.remedy, width=max(width, name_w + 40),
                initial_indent=indent, subsequent_indent=indent + "        ",
            ))
    s = report.summary
    lines.append("")
    lines.append(
        f"{s.passed} passed, {s.warned} warnings, {s.failed} failed, {s.skipped} skipped "
        f"in {report.duration:.2f}s"
    )
    if any(c.ignored for c in report.checks):
        lines.append("* failure ignored by --ignore")
    if any(c.deferred for c in report.checks):
        lines.append("^ to be set by Prepare: a Kubernetes prerequisite the cluster's prepare "
                     "items establish, checked again after them (--prepared) before Deploy")
    if report.ok:
        lines.append(f"{report.hostname} can join a cluster as a {report.role}.")
    else:
        lines.append(f"{report.hostname} cannot join a cluster: fix the failures above.")
    return "\n".join(lines)
