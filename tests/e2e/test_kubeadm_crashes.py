"""The kubeadm profile, unmodified, on agents in network namespaces against the strict kubeadm
double and a real etcd per manager (tests/support/k8s_doubles), with its agents killed -9 at
every kubeadm phase boundary of the first manager's init, of a manager's control-plane join and
of a worker's join (the item's commands with them, as systemd kills a unit's cgroup; the
kubelet and etcd, services of their own, live on), each started again at once, and at the
same boundary of its next run kubeadm alone killed, the agent left to retry (but a join's
kubelet-start, which no run reaches again once the kubelet bootstrapped): every init and
join resumes where it died, and the cluster ends whole, every Node Ready and one etcd member per
manager. (kubeadm alone killed at every boundary, its item run again: tests/integration/kube/
test_kubeadm_profile_items.py.)

Then a manager whose etcd member cannot be removed (the other manager's etcd is down, so etcd
refuses) is deleted: it is not reset, its removal stops and says so with the member's name,
and once the other manager's etcd is back the member is removed first, then the machine: etcd
never keeps a member of a machine that is gone. The profile as it was reset it at once:
`kubeadm reset` warned and exited 0, the cleanup wiped /var/lib/etcd, and etcd kept the dead
member."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.support.k8s_doubles import control
from tests.support.k8s_doubles.calls import agent_env
from tests.support.k8s_doubles.common import marker
from tests.support.k8s_doubles.network import NetworkPlugin
from tests.support.kubeadm_profile import (
    INIT_PHASES,
    MANAGER_JOIN_PHASES,
    PROFILE,
    WORKER_JOIN_PHASES,
)
from tests.support.kubeapi import Cluster, kube_api_server
from tests.support.lan import HUB_IP, Lan
from tests.support.rollout import Fleet, all_ready, fleet

MANAGERS, WORKERS = ["m1", "m2"], ["w1"]
# A join's kubelet-start is done once the kubelet bootstrapped (kubelet.conf): no run reaches
# its boundary again, so kubeadm alone is killed there only in the integration test.
BOOTSTRAPPED = {"m2:join:kubelet-start", "w1:join:kubelet-start"}
BOUNDARIES = [*(f"m1:init:{p}" for p in INIT_PHASES), *(f"m2:join:{p}" for p in MANAGER_JOIN_PHASES),
              *(f"w1:join:{p}" for p in WORKER_JOIN_PHASES)]


def test_agents_killed_at_every_kubeadm_phase_boundary_and_a_member_that_cannot_go(
        tmp_path: Path) -> None:
    log_path, state = tmp_path / "doubles.log", tmp_path / "doubles-state"

    def on_the_lan(network: Lan, stack: contextlib.ExitStack) -> dict[str, str]:
        server = stack.enter_context(kube_api_server(Cluster(ready_delay=0.2),
                                                     netns=network.hub.name, host=HUB_IP))
        stack.enter_context(NetworkPlugin(server, log_path))
        stack.callback(control.stop_all, state)
        control.arm(state, pause=BOUNDARIES)
        return agent_env(log_path, state, server.url)

    with fleet(tmp_path, managers=MANAGERS, workers=WORKERS, cluster_spec=PROFILE.read_text(),
               agent_env=on_the_lan) as f:
        crashed = crash_at_every_boundary(f, state)
        f.wait_for("every machine Ready", lambda: all_ready(f), timeout=120)
        members = control.etcd_members(f.root("m1"), f.node("m1").ns.argv([]))
        stopped, kept, members_after = a_member_that_cannot_go(f, state)

    assert sorted(crashed) == sorted(BOUNDARIES), "an agent was killed at every boundary"
    assert sorted(m["name"] for m in members) == MANAGERS, "etcd members = managers"
    assert not [m for m in members if m["isLearner"]]
    assert stopped["text"] == ("removal stopped: the removal of its etcd member m2 fails on m1: "
                               "sh exited with 1 (expected 0)")
    assert stopped["failing"] and "etcdctl member remove the ID of m2" in stopped["remedy"]
    assert kept, "m2's etcd data wiped while its member was still in etcd"
    assert [m["name"] for m in members_after] == ["m1"]


def crash_at_every_boundary(f: Fleet, state: Path, timeout: float = 300) -> list[str]:
    """Wherever kubeadm stops at a boundary (paused by its hook), kill -9 that node's agent with
    its item's commands and start the agent again; when its run of the item stops there again,
    kill kubeadm alone, the agent left to retry its failed item (a join's kubelet-start: never
    reached again); until every boundary was met. The boundaries met, in order."""
    pending, crashed, agent_killed = list(BOUNDARIES), [], set()
    deadline = time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, f"never paused at {pending} (crashed at {crashed})"
        for spec in pending:
            mark = marker(state, spec)
            pid = mark.read_text() if mark.exists() else ""
            if pid:
                if spec in agent_killed:
                    kill_kubeadm(int(pid))
                    control.resume(state, spec)
                    pending.remove(spec)
                    crashed.append(spec)
                else:
                    kill_agent(f, spec.split(":")[0], int(pid))
                    agent_killed.add(spec)
                    again = spec not in BOOTSTRAPPED
                    control.resume(state, spec, again=again)
                    if not again:
                        pending.remove(spec)
                        crashed.append(spec)
                break
        else:
            time.sleep(0.1)
    return crashed


def kill_kubeadm(pid: int) -> None:
    """kubeadm alone killed, as the OOM killer or an operator would: its item fails, and the
    agent runs it again."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill_agent(f: Fleet, host: str, pid: int) -> None:
    """host's agent and its item's commands killed (a power cut, systemd killing the unit's
    cgroup), then the agent started again."""
    with contextlib.suppress(ProcessLookupError):  # the item's session
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    f.agents[host].kill()
    f.agents[host].wait(timeout=10)
    f.start_agent(host, f.admin("join-token", "create", f.cluster).strip())


def a_member_that_cannot_go(f: Fleet, state: Path) -> tuple[dict[str, Any], bool, list[Any]]:
    """m1's kubelet and etcd down, m2 deleted (forced: 1 of 2 managers is no majority): the note
    its removal stopped with, whether m2's etcd data was still there then; then m1's kubelet
    started again: the etcd members once m2 is gone."""
    control.power_off(state, f.root("m1"))
    f.admin("delete", "m2", "--force")

    def stopped() -> dict[str, Any] | None:
        note = f.admin_json("machines", "get", "m2")["note"]
        return note if note["text"].startswith("removal stopped") else None

    note = f.wait_for("m2's removal stopped", stopped, timeout=90)
    kept = any((f.root("m2") / "var/lib/etcd").iterdir())
    m1 = f.node("m1").ns.run(["systemctl", "restart", "kubelet"], cwd=f.root("m1"),
                             env={**os.environ, **f.env})
    assert m1.returncode == 0, m1.stderr
    f.wait_for("m2 removed", lambda: "m2" not in {m["hostname"] for m in
                                                   f.admin_json("machines")}, timeout=150)
    return note, kept, control.etcd_members(f.root("m1"), f.node("m1").ns.argv([]))
