"""firewall against real processes: a copy of sleep named firewalld (or fapolicyd) is what
the process table shows for the real daemon; systemd's answer comes from a stand-in
systemctl on PATH, since this machine's systemd (if any) must not decide the outcome."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeagent.host import Host
from nodeagent.prechecks import firewall
from nodeagent.prechecks.base import CheckContext, Outcome
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.protocol import Status
from tests.support.agent import checks_by_name, precheck_argv
from tests.support.requirements import require_binary

pytestmark = pytest.mark.integration

Daemon = Callable[[str], subprocess.Popen[bytes]]
# Looked up before any test narrows PATH.
SLEEP = shutil.which("sleep")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """Start a process named name: /bin/sleep copied to that name (the kernel names a
    process after the file it executed)."""
    sleep = SLEEP or require_binary("sleep")
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        program = tmp_path / "daemons" / name
        program.parent.mkdir(exist_ok=True)
        shutil.copy(sleep, program)
        proc = subprocess.Popen([str(program), "60"])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap: a zombie keeps its name in the process table until waited for."""
    proc.kill()
    proc.wait(timeout=5)


@pytest.fixture
def plain_root(tmp_path: Path) -> Path:
    """A machine root without /run/systemd/system: systemd is not running there."""
    root = tmp_path / "plain"
    (root / "etc").mkdir(parents=True)
    return root


@pytest.fixture
def systemd_root(tmp_path: Path) -> Path:
    root = tmp_path / "systemd"
    (root / "run/systemd/system").mkdir(parents=True)
    return root


@pytest.fixture
def path_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only directory on PATH: systemctl there, or nowhere."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def fake_systemctl(bindir: Path, script: str) -> Path:
    """A systemctl that logs its arguments to bindir/calls and runs script (sh) on them."""
    program = bindir / "systemctl"
    program.write_text(f'#!/bin/sh\necho "$@" >> "{bindir}/calls"\n{script}\n')
    program.chmod(0o755)
    return bindir / "calls"


async def check(root: Path) -> Outcome:
    """The firewall check with a fresh snapshot of the process table."""
    return await firewall.run(CheckContext(Host(root), AgentConfig(), "worker"))


@pytest.mark.parametrize("service", ["firewalld", "fapolicyd"])
async def test_running_daemon_fails_from_the_process_table(
    service: str, daemon: Daemon, plain_root: Path
) -> None:
    proc = daemon(service)

    outcome = await check(plain_root)
    assert outcome.status is Status.FAIL
    assert outcome.message == f"{service} active (process table)"
    assert outcome.data == {"active": [service], "source": "process table"}
    assert f"`systemctl disable --now {service}`" in outcome.remedy

    stop(proc)
    outcome = await check(plain_root)
    assert outcome.status is Status.PASS
    assert outcome.message == "no firewalld or fapolicyd running (process table)"


async def test_both_daemons_are_named(daemon: Daemon, plain_root: Path) -> None:
    daemon("fapolicyd")
    daemon("firewalld")
    outcome = await check(plain_root)
    assert outcome.status is Status.FAIL
    assert outcome.message == "firewalld and fapolicyd active (process table)"
    assert outcome.data["active"] == ["firewalld", "fapolicyd"]


async def test_a_similar_name_is_not_a_firewall(daemon: Daemon, plain_root: Path) -> None:
    daemon("firewalld-x")
    daemon("nofapolicyd")
    assert (await check(plain_root)).status is Status.PASS


async def test_systemd_answers_when_it_runs(systemd_root: Path, path_dir: Path) -> None:
    # No firewalld process exists: only systemd's answer can make this fail.
    calls = fake_systemctl(path_dir, 'case "$3" in firewalld.service) exit 0;; *) exit 3;; esac')
    outcome = await check(systemd_root)
    assert outcome.status is Status.FAIL
    assert outcome.message == "firewalld active (systemd)"
    assert outcome.data == {"active": ["firewalld"], "source": "systemd"}
    assert calls.read_text().splitlines() == [
        "is-active --quiet firewalld.service",
        "is-active --quiet fapolicyd.service",
    ]


@pytest.mark.parametrize("code", [3, 4], ids=["inactive", "unknown-unit"])
async def test_systemd_saying_not_active_passes(
    code: int, systemd_root: Path, path_dir: Path
) -> None:
    fake_systemctl(path_dir, f"exit {code}")
    outcome = await check(systemd_root)
    assert outcome.status is Status.PASS
    assert outcome.message == "no firewalld or fapolicyd running (systemd)"


async def test_missing_systemctl_falls_back_to_the_process_table(
    systemd_root: Path, path_dir: Path, daemon: Daemon
) -> None:
    proc = daemon("firewalld")
    outcome = await check(systemd_root)
    assert outcome.status is Status.FAIL
    assert outcome.data["source"] == "process table"
    assert outcome.data["active"] == ["firewalld"]
    assert "systemctl: command not found" in outcome.data["note"]
    assert outcome.message.startswith("firewalld active (process table; systemctl is-active failed")

    stop(proc)
    outcome = await check(systemd_root)
    assert outcome.status is Status.PASS
    assert outcome.data["source"] == "process table"
    assert "(systemd)" not in outcome.message


async def test_unreachable_systemd_falls_back_to_the_process_table(
    systemd_root: Path, path_dir: Path, daemon: Daemon
) -> None:
    # What systemctl says in a container whose /run/systemd/system came from the image.
    fake_systemctl(path_dir, "echo 'System has not been booted with systemd as init system "
                             "(PID 1). Can'\"'\"'t operate.' >&2\nexit 1")
    daemon("fapolicyd")
    outcome = await check(systemd_root)
    assert outcome.status is Status.FAIL
    assert outcome.data["active"] == ["fapolicyd"]
    assert outcome.data["source"] == "process table"
    assert "System has not been booted with systemd" in outcome.data["note"]


def test_cli_reports_the_daemon(daemon: Daemon, plain_root: Path) -> None:
    daemon("firewalld")
    result = subprocess.run(precheck_argv(plain_root, "--output", "json"), capture_output=True,
                            text=True, timeout=30, check=False)
    found = checks_by_name(result)["firewall"]
    assert result.returncode == 1
    assert found["status"] == "fail"
    assert found["message"] == "firewalld active (process table)"
    assert found["data"] == {"active": ["firewalld"], "source": "process table"}
