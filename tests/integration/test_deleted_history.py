"""A deleted machine's item output and events stay readable by the name the operator knows it by:
`coordinator machines logs HOST` and `coordinator events --machine HOST` find the record of that
hostname deleted last (saying so, and naming the others), and an id picks an older one."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.agent import AgentProcess
from tests.support.builders import AUTO_APPROVE_CLUSTER
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

HOST = socket.gethostname()  # the kernel's: what the agent registers as


def machine_ids(lines: str) -> set[str]:
    return {json.loads(line)["machine"] for line in lines.splitlines() if line.strip()}


def rolled_out_and_deleted(coordinator: ServedCoordinator, node: AgentProcess) -> str:
    """Start the node's agent, let its machine reach Ready, delete it (reset items and all) and
    return its id once its record is gone and its agent stopped."""
    node.start()
    wait_until(lambda: coordinator.admin.all_machines(), 60, "the registration")
    coordinator.wait_state(HOST, "Ready", timeout=60)
    (machine,) = coordinator.admin.all_machines()
    coordinator.cli("delete", HOST, "--force", "--yes")  # the only manager, the first
    wait_until(lambda: not coordinator.admin.all_machines(), 60, "the record removed")
    assert node.process is not None and node.process.wait(timeout=30) == 3
    return str(machine["id"])


def test_a_deleted_machines_logs_and_events_are_found_by_its_hostname(tmp_path: Path) -> None:
    node = AgentProcess(tmp_path / "node")
    passing_root(node.root, HOST)
    with running_coordinator(tmp_path, AUTO_APPROVE_CLUSTER) as coordinator:
        join = coordinator.cli("join-token", "create", "lab").stdout.strip()
        node.configure(f"join: {join}\nheartbeatSeconds: 1\nignorePrechecks: [all]")
        first = rolled_out_and_deleted(coordinator, node)

        logs = coordinator.cli("machines", "logs", HOST)
        assert "prepare/setup attempt 1 succeeded" in logs.stdout, logs.stdout
        assert "reset/wipe attempt 1 succeeded" in logs.stdout
        assert f"{HOST} was deleted from cluster lab" in logs.stderr and first in logs.stderr

        second = rolled_out_and_deleted(coordinator, node)  # the node joined again, and left
        logs = coordinator.cli("machines", "logs", HOST, "--output", "json")
        assert machine_ids(logs.stdout) == {second}
        assert f"history of machine {second}" in logs.stderr
        assert f"the last of 2 deleted machines of that name; the others by id: {first}" \
            in logs.stderr, logs.stderr
        older = coordinator.cli("machines", "logs", first, "--output", "json")
        assert machine_ids(older.stdout) == {first}

        events = coordinator.cli("events", "--machine", HOST, "--output", "json")
        assert machine_ids(events.stdout) == {second}
        found = [json.loads(line) for line in events.stdout.splitlines()]
        assert found[0]["kind"] == "registered" and "-> removed" in found[-1]["message"], found
        assert machine_ids(coordinator.cli("events", "--machine", first, "--output",
                                           "json").stdout) == {first}
        assert {e["machine"] for e in coordinator.admin.get(f"/v1/events?machine={HOST}")} \
            == {second}  # the API answers the same

        unknown = coordinator.cli("machines", "logs", "never-was", ok=False)
        assert unknown.returncode == 1
        assert "no machine with id or hostname never-was, now or deleted" in unknown.stderr
