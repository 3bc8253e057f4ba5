"""`nodeagent precheck` through click, reading a temp machine root.

The tree makes every file-based check pass. A few checks also read the live machine this
test runs on (sockets, processes, the kernel hostname): the passing runs ignore those, so
that they can only turn into ignored warnings, and every other check must pass or skip.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from nodeagent.cli import main
from nodeagent.prechecks import NAMES
from nodeagent.prechecks.runtime import RECOMMENDED_BINARIES, REQUIRED_BINARIES
from nodeagent.wire.protocol import PrecheckReport
from tests.support.roots import BindSocket, RootTree

LIVE = ("dns-port", "kubernetes-leftovers", "firewall", "hostname")
IGNORE_LIVE = ("--ignore", ",".join(LIVE))
# Without a coordinator URL or NTP servers in the config, these skip.
SKIPPED = {"coordinator", "ntp-reachable", "time-skew"}
HOSTNAME = socket.gethostname()
# The tree sits on the temp dir's filesystem: do not ask it for 5 GiB.
CONFIG = "thresholds:\n  minVarFreeGiB: 0.001\n"


def cpuinfo(processors: int) -> str:
    return "".join(f"processor\t: {n}\nmodel name\t: Test CPU\n\n" for n in range(processors))


@dataclass
class FakeNode:
    """A machine root tree and its agent config, checked through the CLI."""

    tree: RootTree
    config: Path

    def precheck(self, *args: str) -> Result:
        argv = ["precheck", "--root", str(self.tree.path), "--config", str(self.config), *args]
        return CliRunner().invoke(main, argv)


@pytest.fixture
def machine(tmp_path: Path, root_tree: RootTree, bind_socket: BindSocket) -> FakeNode:
    """A Debian 12 worker on which every file-based check passes."""
    write = root_tree.write
    write("/etc/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                             'VERSION_ID="12"\n')
    write("/etc/hostname", f"{HOSTNAME}\n")
    write("/etc/resolv.conf", "nameserver 10.0.0.2\noptions edns0\n")
    write("/proc/sys/net/ipv4/ip_forward", "1\n")
    write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
    write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
    write("/proc/cpuinfo", cpuinfo(2))
    write("/proc/meminfo", "MemTotal: 4194304 kB\nMemFree: 2097152 kB\n")
    write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    write("/sys/class/dmi/id/product_uuid", "4C4C4544-0042-3510-8052-B4C04F4E5032\n")
    root_tree.mkdir("/var/lib/kubelet")
    for name in (*REQUIRED_BINARIES, *RECOMMENDED_BINARIES):
        write(f"/usr/bin/{name}", "#!/bin/sh\nexit 0\n", mode=0o755)
    bind_socket(root_tree.path / "run/containerd/containerd.sock")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    return FakeNode(root_tree, config)


def statuses(output: str) -> dict[str, str]:
    """Check name -> the status column of its table row."""
    rows = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in NAMES:
            rows[fields[0]] = fields[1]
    return rows


def assert_file_checks_pass(found: dict[str, str], pass_mark: str = "pass") -> None:
    for name in NAMES:
        if name in LIVE:
            assert found[name] in (pass_mark, "WARN*"), (name, found[name])
        elif name in SKIPPED:
            assert found[name] == "skip", name
        else:
            assert found[name] == pass_mark, (name, found[name])


def test_passing_machine_exits_0(machine: FakeNode) -> None:
    result = machine.precheck(*IGNORE_LIVE)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "MESSAGE"]
    found = statuses(result.stdout)
    assert list(found) == list(NAMES)
    assert_file_checks_pass(found)
    assert "os                    pass    Debian GNU/Linux 12 (bookworm) is supported" in lines
    assert re.search(r"^container-runtime +pass +container runtime found: containerd at "
                     r"/run/containerd/containerd.sock$", result.stdout, re.MULTILINE)
    assert re.search(r"^\d+ passed, \d+ warnings, 0 failed, 3 skipped in \d+\.\d\ds$",
                     result.stdout, re.MULTILINE), result.stdout
    assert lines[-1] == f"{HOSTNAME} can join a cluster as a worker."


def test_json_report(machine: FakeNode) -> None:
    result = machine.precheck("--output", "json", *IGNORE_LIVE)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema"] == "nodeagent.precheck/v1"
    report = PrecheckReport.model_validate(document)
    assert report.ok is True
    assert report.role == "worker"
    assert report.hostname == HOSTNAME
    assert [c.name for c in report.checks] == list(NAMES)
    assert_file_checks_pass({c.name: c.status.value if not c.ignored else "WARN*"
                             for c in report.checks})
    counts = report.summary
    assert (counts.failed, counts.skipped) == (0, len(SKIPPED))
    assert counts.passed + counts.warned + counts.skipped == len(NAMES)
    cpu = next(c for c in report.checks if c.name == "cpu")
    assert cpu.data == {"cpus": 2, "required": 1}
    assert cpu.severity == "hard"


def test_a_prerequisite_off_before_prepare_is_to_be_set_by_prepare(machine: FakeNode) -> None:
    """Forwarding off on a stock host: what the cluster's prepare items set, so not a failure
    before them (exit 0), marked and explained."""
    machine.tree.write("/proc/sys/net/ipv4/ip_forward", "0\n")
    result = machine.precheck(*IGNORE_LIVE)
    assert result.exit_code == 0, result.output
    assert statuses(result.stdout)["ip-forward"] == "WARN^"
    assert ", 0 failed, " in result.stdout
    assert "^ to be set by Prepare" in result.stdout
    report = json.loads(machine.precheck("--output", "json", *IGNORE_LIVE).stdout)
    check = next(c for c in report["checks"] if c["name"] == "ip-forward")
    assert (report["ok"], report["prepared"]) == (True, False)
    assert (check["status"], check["stage"], check["deferred"]) == ("warn", "prepare", True)


def test_hard_failure_exits_1_with_its_remedy(machine: FakeNode) -> None:
    machine.tree.write("/proc/sys/net/ipv4/ip_forward", "0\n")
    result = machine.precheck("--prepared", *IGNORE_LIVE)
    assert result.exit_code == 1, result.output
    assert statuses(result.stdout)["ip-forward"] == "FAIL"
    assert "IPv4 forwarding is off (/proc/sys/net/ipv4/ip_forward = 0)" in result.stdout
    assert re.search(r"^ +remedy: `sysctl -w net.ipv4.ip_forward=1`", result.stdout, re.MULTILINE)
    assert ", 1 failed, " in result.stdout
    assert result.stdout.splitlines()[-1] == (
        f"{HOSTNAME} cannot join a cluster: fix the failures above."
    )

    ignored = machine.precheck("--prepared", "--ignore", "ip-forward", *IGNORE_LIVE)
    assert ignored.exit_code == 0, ignored.output
    assert statuses(ignored.stdout)["ip-forward"] == "WARN*"
    assert ", 0 failed, " in ignored.stdout
    assert "* failure ignored by --ignore" in ignored.stdout


def test_ignore_all_turns_every_failure_into_a_warning(machine: FakeNode) -> None:
    machine.tree.write("/etc/os-release", "ID=centos\nVERSION_ID=7\n")
    machine.tree.write("/etc/resolv.conf", "nameserver 10.0.0.2\noptions rotate\n")
    failing = machine.precheck("--output", "json", *IGNORE_LIVE)
    assert failing.exit_code == 1
    assert {c["name"] for c in json.loads(failing.stdout)["checks"]
            if c["status"] == "fail"} == {"os", "resolv-rotate"}

    result = machine.precheck("--output", "json", "--ignore", "all")
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert (checks["os"]["status"], checks["os"]["ignored"]) == ("warn", True)
    assert checks["resolv-rotate"]["ignored"] is True
    assert checks["resolv-rotate"]["message"] == "/etc/resolv.conf sets `options rotate`"


def test_soft_failures_only_warn(machine: FakeNode) -> None:
    machine.tree.write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n"
                                      "/swap.img\tfile\t2097148\t0\t-2\n")
    result = machine.precheck(*IGNORE_LIVE)
    assert result.exit_code == 0, result.output
    assert statuses(result.stdout)["swap"] == "WARN"
    assert "swap is enabled on /swap.img" in result.stdout


def test_role_comes_from_the_option_then_the_config(machine: FakeNode) -> None:
    machine.tree.write("/proc/cpuinfo", cpuinfo(1))
    as_manager = machine.precheck("--role", "manager", *IGNORE_LIVE)
    assert as_manager.exit_code == 1
    assert "1 CPU(s); a manager needs at least 2" in as_manager.stdout

    machine.config.write_text(CONFIG + "role: manager\n")
    from_config = machine.precheck(*IGNORE_LIVE)
    assert from_config.exit_code == 1
    assert "1 CPU(s); a manager needs at least 2" in from_config.stdout

    overridden = machine.precheck("--role", "worker", *IGNORE_LIVE)
    assert overridden.exit_code == 0, overridden.output
    assert overridden.stdout.splitlines()[-1] == f"{HOSTNAME} can join a cluster as a worker."


def test_bad_config_exits_2_naming_file_line_and_field(machine: FakeNode) -> None:
    machine.config.write_text("role: worker\nntp:\n  servers: [ntp.example]\n  maxSkewSeconds: soon\n")
    result = machine.precheck()
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: bad config file\n{machine.config}:4: ntp.maxSkewSeconds: Input should be a "
        "valid number, unable to parse string as a number\n"
    )
    assert "Traceback" not in result.output


def test_unknown_config_field_exits_2(machine: FakeNode) -> None:
    machine.config.write_text("thresholds:\n  minVarFreeGiB: 1\n  maxLoad: 3\n")
    result = machine.precheck()
    assert result.exit_code == 2
    assert f"{machine.config}:3: thresholds.maxLoad: unknown field" in result.stderr


def test_yaml_syntax_error_exits_2_with_the_line(machine: FakeNode) -> None:
    machine.config.write_text("role: worker\nntp: {servers: [a]\n")
    result = machine.precheck()
    assert result.exit_code == 2
    assert f"{machine.config}:3: not valid YAML: " in result.stderr
    assert "Traceback" not in result.output


def test_missing_config_file_exits_2(machine: FakeNode, tmp_path: Path) -> None:
    machine.config = tmp_path / "absent.yaml"
    result = machine.precheck()
    assert result.exit_code == 2
    assert f"{machine.config}: cannot read: No such file or directory" in result.stderr


def test_unknown_ignore_name_exits_2(machine: FakeNode) -> None:
    result = machine.precheck("--ignore", "swap,nosuchcheck")
    assert result.exit_code == 2
    assert "--ignore: unknown check name(s): nosuchcheck; known: " in result.stderr
    assert result.stdout == ""


def test_without_config_option_the_config_under_root_is_read(machine: FakeNode) -> None:
    machine.tree.write("/etc/nodeagent/config.yaml", CONFIG + "role: manager\n")
    machine.tree.write("/proc/cpuinfo", cpuinfo(1))
    argv = ["precheck", "--root", str(machine.tree.path), "--output", "json", *IGNORE_LIVE]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    report = PrecheckReport.model_validate_json(result.stdout)
    assert report.role == "manager"


def test_the_machine_identity_the_coordinator_compares_is_reported(machine: FakeNode) -> None:
    report = json.loads(machine.precheck("--output", "json", *IGNORE_LIVE).stdout)
    identity = next(c for c in report["checks"] if c["name"] == "machine-identity")
    assert identity["status"] == "pass"
    assert identity["data"]["product_uuid"] == "4c4c4544-0042-3510-8052-b4c04f4e5032"
    assert "00:00:00:00:00:00" not in identity["data"]["macs"]  # lo's
    (machine.tree.path / "sys/class/dmi/id/product_uuid").unlink()
    report = json.loads(machine.precheck("--output", "json", *IGNORE_LIVE).stdout)
    identity = next(c for c in report["checks"] if c["name"] == "machine-identity")
    assert (identity["status"], identity["data"]["product_uuid"]) == ("warn", None)


def test_an_ignored_machine_identity_reports_nothing_to_compare(machine: FakeNode) -> None:
    """Several agents on one host share its MACs: ignored, the check reports none, so the
    coordinator holds none of them as clones."""
    report = json.loads(machine.precheck("--output", "json", "--ignore", "machine-identity",
                                         *IGNORE_LIVE).stdout)
    identity = next(c for c in report["checks"] if c["name"] == "machine-identity")
    assert (identity["status"], identity["data"]) == ("skip", {})
