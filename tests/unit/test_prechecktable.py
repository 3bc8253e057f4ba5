from __future__ import annotations

from nodeagent.prechecktable import precheck_table
from nodeagent.wire.protocol import CheckResult, PrecheckReport, Severity, Status, Summary


def result(name: str, status: Status, message: str, remedy: str = "", ignored: bool = False,
           severity: Severity = Severity.HARD) -> CheckResult:
    return CheckResult(name=name, severity=severity, status=status, message=message,
                       remedy=remedy, duration=0.01, ignored=ignored)


def report(*checks: CheckResult, ok: bool = True, summary: Summary | None = None) -> PrecheckReport:
    return PrecheckReport(hostname="node-1", role="worker", started_at=0.0, duration=0.123,
                          ok=ok, summary=summary or Summary(), checks=list(checks))


def test_rows_are_aligned_under_the_header() -> None:
    table = precheck_table(report(
        result("os", Status.PASS, "Debian 12 is supported"),
        result("kubernetes-leftovers", Status.SKIP, "nothing"),
    ))
    lines = table.splitlines()
    assert lines[0] == "CHECK                 STATUS  MESSAGE"
    assert lines[1] == "os                    pass    Debian 12 is supported"
    assert lines[2] == "kubernetes-leftovers  skip    nothing"


def test_remedy_lines_only_for_failures_and_warnings() -> None:
    table = precheck_table(report(
        result("a", Status.PASS, "fine", remedy="never shown for a pass"),
        result("b", Status.SKIP, "skipped", remedy="never shown for a skip"),
        result("c", Status.WARN, "swap is on", remedy="swapoff -a"),
        result("d", Status.FAIL, "forwarding off", remedy="sysctl -w net.ipv4.ip_forward=1"),
        ok=False,
    ))
    assert "never shown" not in table
    lines = table.splitlines()
    assert lines[3:7] == [
        "c      WARN    swap is on",
        "               remedy: swapoff -a",
        "d      FAIL    forwarding off",
        "               remedy: sysctl -w net.ipv4.ip_forward=1",
    ]


def test_long_messages_and_remedies_wrap_under_the_message_column() -> None:
    long = " ".join(["word"] * 40)
    table = precheck_table(report(result("cpu", Status.FAIL, long, remedy=long)), width=60)
    body = table.splitlines()[1:-3]
    assert len(body) > 2
    assert all(len(line) <= 60 for line in body)
    assert body[0].startswith("cpu    FAIL    word word")
    remedy_at = next(i for i, line in enumerate(body) if "remedy:" in line)
    assert all(line.startswith(" " * 15) for line in body[1:remedy_at])
    assert body[remedy_at].startswith(" " * 15 + "remedy: word")
    assert all(line.startswith(" " * 23 + "word") for line in body[remedy_at + 1:])


def test_summary_and_verdict_when_ok() -> None:
    table = precheck_table(report(
        result("os", Status.PASS, "ok"),
        summary=Summary(passed=15, warned=1, failed=0, skipped=3),
    ))
    lines = table.splitlines()
    assert lines[-3] == ""
    assert lines[-2] == "15 passed, 1 warnings, 0 failed, 3 skipped in 0.12s"
    assert lines[-1] == "node-1 can join a cluster as a worker."
    assert "ignored" not in table


def test_verdict_when_a_hard_check_failed() -> None:
    table = precheck_table(report(result("os", Status.FAIL, "no", remedy="reinstall"), ok=False,
                                  summary=Summary(failed=1)))
    assert table.splitlines()[-1] == "node-1 cannot join a cluster: fix the failures above."


def test_ignored_failures_are_starred_and_explained() -> None:
    table = precheck_table(report(
        result("hostname", Status.WARN, "bad name", remedy="rename it", ignored=True),
        result("swap", Status.WARN, "swap is on", remedy="swapoff -a", severity=Severity.SOFT),
        summary=Summary(warned=2),
    ))
    lines = table.splitlines()
    assert lines[1] == "hostname  WARN*   bad name"
    assert lines[2] == " " * 18 + "remedy: rename it"
    assert lines[3] == "swap      WARN    swap is on"
    assert lines[-2] == "* failure ignored by --ignore"
