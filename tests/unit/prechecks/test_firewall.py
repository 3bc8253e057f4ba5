from __future__ import annotations

from nodeagent.host import ProcessInfo
from nodeagent.prechecks.firewall import evaluate, running_processes, systemd_running
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree


def proc(pid: int, name: str) -> ProcessInfo:
    return ProcessInfo(pid, name, f"/usr/sbin/{name}", (name,))


def test_systemd_runs_when_run_systemd_system_exists(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    assert systemd_running(make_ctx()) is False
    root_tree.mkdir("/run/systemd/system")
    assert systemd_running(make_ctx()) is True


def test_process_table_finds_the_daemons_by_exact_name_in_service_order() -> None:
    processes = [proc(1, "systemd"), proc(30, "fapolicyd"), proc(31, "firewalld-x"),
                 proc(32, "firewalld"), proc(33, "firewalld")]
    assert running_processes(processes) == ["firewalld", "fapolicyd"]
    assert running_processes([proc(1, "nofapolicyd"), proc(2, "sshd")]) == []


def test_nothing_running_passes_naming_the_source() -> None:
    outcome = evaluate([], "process table")
    assert outcome.status is Status.PASS
    assert outcome.message == "no firewalld or fapolicyd running (process table)"
    assert outcome.data == {"source": "process table"}


def test_active_daemons_fail_with_disable_commands() -> None:
    outcome = evaluate(["firewalld", "fapolicyd"], "systemd")
    assert outcome.status is Status.FAIL
    assert outcome.message == "firewalld and fapolicyd active (systemd)"
    assert outcome.remedy == (
        "`systemctl disable --now firewalld`; `systemctl disable --now fapolicyd`, "
        "or open the Kubernetes ports and allow the cluster's binaries"
    )
    assert outcome.data == {"active": ["firewalld", "fapolicyd"], "source": "systemd"}


def test_process_table_fallback_says_why_systemd_did_not_answer() -> None:
    note = "systemctl is-active failed: systemctl: command not found"
    outcome = evaluate(running_processes([proc(30, "firewalld")]), "process table", note)
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "firewalld active (process table; systemctl is-active failed: systemctl: command not found)"
    )
    assert outcome.data == {"active": ["firewalld"], "source": "process table", "note": note}

    clean = evaluate(running_processes([]), "process table", note)
    assert clean.status is Status.PASS
    assert clean.data["note"] == note
