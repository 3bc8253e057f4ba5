"""A real `nodeagent run` against a real coordinator through the turns of a machine's life that
restarts and lost answers make: a Pending machine's agent restarted while its prechecks fail,
and a registration committed whose answer never reached the agent."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.prechecks import NAMES
from tests.support.agent import AgentProcess
from tests.support.builders import AUTO_APPROVE_CLUSTER, NOOP_CLUSTER
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.relay import relay
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# A loopback node cannot pass the host-bound checks: one hard check that a file decides counts.
IGNORED = sorted(set(NAMES) - {"resolv-rotate"})
RECHECK = 4  # precheckRecheckSeconds: 60 by default
# (a host check: ip-forward, which Prepare sets, is no failure before it)
ROTATING = "resolv-rotate: /etc/resolv.conf sets `options rotate`"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path / "node")
    passing_root(agent.root, "lifecycle-node")
    yield agent
    if agent.process is not None and agent.process.poll() is None:
        agent.stop()


def fixed(node: AgentProcess, on: bool) -> None:
    """What the node's one counted check reads: fixed or broken by hand."""
    (node.root / "etc/resolv.conf").write_text(
        "nameserver 127.0.0.1\n" + ("" if on else "options rotate\n"))


def failures(coordinator: ServedCoordinator) -> list[str] | None:
    """The hard precheck failures the coordinator holds for the one machine (None: none yet)."""
    machines = coordinator.admin.all_machines()
    return machines[0]["precheck_failures"] if machines else None


def test_a_pending_machine_rechecks_at_every_start_and_until_it_is_approved(
        tmp_path: Path, node: AgentProcess) -> None:
    with running_coordinator(tmp_path, NOOP_CLUSTER) as coordinator:
        join = coordinator.cli("join-token", "create", "lab").stdout.strip()
        node.configure(f"join: {join}\nheartbeatSeconds: 1\nprecheckRecheckSeconds: {RECHECK}\n"
                       f"ignorePrechecks: [{', '.join(IGNORED)}]")
        fixed(node, False)
        node.start()
        wait_until(lambda: failures(coordinator) == [ROTATING], 60, "a failing registration")

        # Fixed while its agent was down: its next start checks again.
        node.stop(signal.SIGKILL)
        fixed(node, True)
        node.start()
        wait_until(lambda: failures(coordinator) == [], 30, "passing prechecks after a kill -9")
        # Broken while it runs, after they passed: it keeps checking (every RECHECK seconds at
        # most while they pass, as configured; 60 by default) until the machine is approved,
        # and says so.
        fixed(node, False)
        wait_until(lambda: failures(coordinator) == [ROTATING], 4 * RECHECK,
                   "failing prechecks again")
        # Fixed, and broken again while it was stopped: its next start says so.
        fixed(node, True)
        wait_until(lambda: failures(coordinator) == [], 30, "passing prechecks, found by itself")
        node.stop(signal.SIGTERM)
        fixed(node, False)
        node.start()
        wait_until(lambda: failures(coordinator) == [ROTATING], 30,
                   "failing prechecks after a stop")
        fixed(node, True)
        wait_until(lambda: failures(coordinator) == [], 30, "passing prechecks once more")
        (machine,) = coordinator.admin.all_machines()
        coordinator.cli("approve", machine["id"], "--role", "worker")
        coordinator.wait_state(machine["hostname"], "Prepare", timeout=30)


@pytest.mark.parametrize("killed", ["coordinator", "agent"])
def test_a_registration_whose_answer_was_lost_is_retried_to_the_same_machine(
        tmp_path: Path, node: AgentProcess, killed: str) -> None:
    """Auto-approved at once, the machine is no longer Pending when the agent retries: before,
    the retry was refused as a second node taking it over, or for a used-up join token."""
    with running_coordinator(tmp_path, AUTO_APPROVE_CLUSTER, tls=False) as coordinator, \
            relay(coordinator.port, losing=b"POST /v1/agent/register") as lossy:
        token = coordinator.cli("join-token", "create", "lab", "--max-uses", "1",
                                "--token-only").stdout.strip()
        node.configure(f"coordinator: {{url: '{lossy.url}', timeout: 1}}\njoinToken: {token}\n"
                       "heartbeatSeconds: 1\nignorePrechecks: [all]")
        node.start()
        (machine,) = wait_until(lambda: coordinator.admin.all_machines(), 60,
                                "the registration, committed")
        assert machine["approved"] and lossy.lost
        assert not (node.state_dir / "identity.json").exists()
        if killed == "coordinator":
            coordinator.stop(crash=True)  # its answer is lost for good
            lossy.losing = None
            coordinator.start()
        else:
            node.stop(signal.SIGKILL)  # before it heard the answer and saved its identity
            lossy.losing = None
            node.start()
        coordinator.wait_state(machine["hostname"], "Ready", timeout=60)
        assert [m["id"] for m in coordinator.admin.all_machines()] == [machine["id"]]
        assert len(coordinator.admin.get("/v1/events?kind=registered")) == 1
        identity = json.loads((node.state_dir / "identity.json").read_text())
        assert identity["machine_id"] == machine["id"]
        assert not (node.state_dir / "registration.json").exists()
        assert node.process is not None and node.process.poll() is None
