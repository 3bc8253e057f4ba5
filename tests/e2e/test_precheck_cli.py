"""`nodeagent precheck` end to end, as an operator runs it, on a fresh node: a network
namespace with its own hostname (UTS namespace) and its own process table (PID namespace),
reading a machine root on which every file-based check passes."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent.prechecks import NAMES
from nodeagent.wire.protocol import PrecheckReport, Status
from tests.support.agent import precheck_argv
from tests.support.netns import Namespace, namespace
from tests.support.roots import cpuinfo, passing_root

pytestmark = pytest.mark.integration

HOSTNAME = "node-e2e"
# Without a coordinator URL or NTP servers configured, those checks skip.
SKIPPED = {"coordinator", "ntp-reachable", "time-skew"}
# The tree lives on whatever filesystem holds the tests' temp dir: do not ask it for 5 GiB.
CONFIG = "thresholds:\n  minVarFreeGiB: 0.01\n"


@dataclass
class Node:
    ns: Namespace
    root: Path
    config: Path

    def precheck(self, *args: str, hostname: str | None = None,
                 config: Path | None = None) -> subprocess.CompletedProcess[str]:
        argv = precheck_argv(self.root, "--config", str(config or self.config), *args,
                             own_pids=True)
        return self.ns.run(argv, hostname=hostname)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    with namespace(hostname=HOSTNAME) as ns:
        yield Node(ns, passing_root(tmp_path / "root", HOSTNAME), config)


def table_rows(stdout: str) -> dict[str, list[str]]:
    """Check name -> the status column of every line that starts with that name."""
    rows: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in NAMES:
            rows.setdefault(fields[0], []).append(fields[1])
    return rows


def report_of(result: subprocess.CompletedProcess[str]) -> PrecheckReport:
    return PrecheckReport.model_validate_json(result.stdout)


def test_passing_node_prints_every_check_and_exits_0(node: Node) -> None:
    result = node.precheck()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "MESSAGE"]
    assert table_rows(result.stdout) == {
        name: ["skip" if name in SKIPPED else "pass"] for name in NAMES
    }
    assert "remedy:" not in result.stdout
    summary = f"{len(NAMES) - len(SKIPPED)} passed, 0 warnings, 0 failed, {len(SKIPPED)} skipped"
    assert re.fullmatch(rf"{summary} in \d+\.\d\ds", lines[-2]), lines[-2]
    assert lines[-1] == f"{HOSTNAME} can join a cluster as a worker."
    assert f"hostname '{HOSTNAME}' is a valid node name" in result.stdout


def test_json_report_is_the_wire_document(node: Node) -> None:
    result = node.precheck("--output", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(result)
    assert [check.name for check in report.checks] == list(NAMES)
    assert report.hostname == HOSTNAME
    assert report.role == "worker"
    assert report.ok is True
    assert report.summary.model_dump() == {
        "passed": len(NAMES) - len(SKIPPED), "warned": 0, "failed": 0, "skipped": len(SKIPPED)
    }
    statuses = {check.name: check.status for check in report.checks}
    assert statuses == {n: Status.SKIP if n in SKIPPED else Status.PASS for n in NAMES}
    assert '"schema": "nodeagent.precheck/v1"' in result.stdout


def test_invalid_hostname_fails_with_its_remedy_until_ignored(node: Node) -> None:
    result = node.precheck(hostname="Bad-Host")
    assert result.returncode == 1, result.stdout
    assert table_rows(result.stdout)["hostname"] == ["FAIL"]
    assert "hostname 'Bad-Host' is not a valid node name: it has uppercase letters" in result.stdout
    assert re.search(r"^ +remedy: set an RFC 1123 name: `hostnamectl set-hostname",
                     result.stdout, re.MULTILINE), result.stdout
    assert "0 warnings, 1 failed" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "Bad-Host cannot join a cluster: fix the failures above."
    )

    ignored = node.precheck("--ignore", "hostname", hostname="Bad-Host")
    assert ignored.returncode == 0, ignored.stdout
    assert table_rows(ignored.stdout)["hostname"] == ["WARN*"]
    assert "1 warnings, 0 failed" in ignored.stdout
    assert "* failure ignored by --ignore" in ignored.stdout
    assert ignored.stdout.splitlines()[-1] == "Bad-Host can join a cluster as a worker."


def test_etc_hostname_mismatch_fails(node: Node) -> None:
    (node.root / "etc/hostname").write_text("old-name\n")
    result = node.precheck("--output", "json")
    assert result.returncode == 1
    report = report_of(result)
    assert report.ok is False
    (check,) = (c for c in report.checks if c.status is Status.FAIL)
    assert check.name == "hostname"
    assert check.message == (
        f"hostname '{HOSTNAME}' differs from /etc/hostname ('old-name'); "
        "the node would be renamed on reboot"
    )
    assert check.remedy == f"make them agree: `hostnamectl set-hostname {HOSTNAME}`"
    assert check.data == {"hostname": HOSTNAME, "etc_hostname": "old-name"}


def test_manager_needs_two_cpus(tmp_path: Path, node: Node) -> None:
    (node.root / "proc/cpuinfo").write_text(cpuinfo(1))

    as_manager = node.precheck("--role", "manager", "--output", "json")
    assert as_manager.returncode == 1
    report = report_of(as_manager)
    assert report.role == "manager"
    failures = {c.name: c for c in report.checks if c.status is Status.FAIL}
    assert list(failures) == ["cpu"]
    assert failures["cpu"].message == "1 CPU(s); a manager needs at least 2"
    assert failures["cpu"].data == {"cpus": 1, "required": 2}

    # The config's role counts when --role is not given.
    config = tmp_path / "manager.yaml"
    config.write_text(CONFIG + "role: manager\n")
    from_config = node.precheck(config=config)
    assert from_config.returncode == 1
    assert table_rows(from_config.stdout)["cpu"] == ["FAIL"]


def test_ignore_all_turns_every_failure_into_a_warning(node: Node) -> None:
    (node.root / "proc/cpuinfo").write_text(cpuinfo(1))
    (node.root / "proc/sys/net/ipv4/ip_forward").write_text("0\n")
    # --prepared: before Prepare, ip-forward's failure is deferred, not ignored
    result = node.precheck("--role", "manager", "--prepared", "--ignore", "all",
                           hostname="Bad-Host")
    assert result.returncode == 0, result.stdout
    rows = table_rows(result.stdout)
    assert rows["hostname"] == rows["cpu"] == rows["ip-forward"] == ["WARN*"]
    assert "3 warnings, 0 failed" in result.stdout

    # Names given in pieces, comma-separated and repeated, ignore exactly those.
    partial = node.precheck("--role", "manager", "--prepared", "--ignore", "hostname,cpu",
                            "--ignore", "ip-forward", "--output", "json", hostname="Bad-Host")
    assert partial.returncode == 0, partial.stdout
    assert {c.name for c in report_of(partial).checks if c.ignored} == {
        "hostname", "cpu", "ip-forward"
    }


def test_bad_config_exits_2_naming_file_line_and_field(node: Node, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("role: worker\nntp:\n  maxSkewSeconds: lots\n")
    result = node.precheck(config=config)
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"{config}:3: ntp.maxSkewSeconds: Input should be a valid number" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_ignore_name_exits_2(node: Node) -> None:
    result = node.precheck("--ignore", "hostname,no-such-check")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "unknown check name(s): no-such-check" in result.stderr
    assert "Traceback" not in result.stderr
