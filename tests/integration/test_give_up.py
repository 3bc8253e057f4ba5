"""An item that fails retry.maxAttempts times, with a real `coordinator serve` and a real
`nodeagent run`: the operator is told the agent gave up (not "failing" forever), an unrelated
change does not start it again behind the operator's back, and once the cause is fixed
`coordinator machines retry` has it run again, on the same agent process, to Ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.client import ClientError
from tests.support.agent import agent_of
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# The prepare item needs a file the operator forgot: it fails until the file is there.
CLUSTER = """\
name: lab
release: "1"
settings:
  retry: {baseSeconds: 0.1, maxSeconds: 0.2, maxAttempts: 3}
machineTypes:
  manager:
    - {name: app-config, phase: prepare, action: {type: exec, argv: [sh, -c,
        "test -e app.conf || { echo 'app.conf missing (password=hunter2-secret)' >&2; exit 2; }"]}}
    - {name: start, phase: deploy, action: {type: exec, argv: ["true"]}}
"""


def events(coordinator: ServedCoordinator, kind: str) -> list[dict[str, Any]]:
    return list(coordinator.admin.get(f"/v1/events?kind={kind}"))


def refusal(coordinator: ServedCoordinator, ref: str) -> tuple[int, str]:
    """The status and message of the API's refusal to retry machine ref."""
    with pytest.raises(ClientError) as refused:
        coordinator.admin.request("POST", f"/v1/machines/{ref}/retry")
    return refused.value.status, str(refused.value)


def test_a_given_up_item_is_said_and_runs_again_on_the_operators_retry(tmp_path: Path) -> None:
    with running_coordinator(tmp_path, CLUSTER) as coordinator, \
            agent_of(coordinator, tmp_path) as agent:
        (machine,) = coordinator.admin.all_machines()
        host = machine["hostname"]
        coordinator.cli("approve", host, "--role", "manager")
        wait_until(lambda: coordinator.machine(host)["step"]["gave_up"], 60,
                   "the agent to give up on app-config")

        # Every view says so: who gave up, on what, after how many attempts, why, and what to do.
        said = ("app-config: gave up after 3 attempts (failing for", "sh exited with 2 "
                f"(expected 0); fix the cause, then `coordinator machines retry {host}`")
        for view in (coordinator.cli("machines").stdout,
                     coordinator.cli("machines", "get", host).stdout):
            assert all(part in view for part in said), view
        status = coordinator.cli("status", "lab").stdout
        assert "its agent gave up on app-config after 3 attempts" in " ".join(status.split())
        last = events(coordinator, "item")[-1]
        assert last["data"]["gave_up"] and "its agent gave up on app-config" in last["message"]
        assert "hunter2-secret" not in json.dumps(events(coordinator, "item"))  # redacted

        # Retrying an unknown machine names it; a new generation does not restart the item.
        unknown = coordinator.cli("machines", "retry", "no-such-node", ok=False)
        assert unknown.returncode != 0 and "no-such-node" in unknown.stderr
        assert refusal(coordinator, "no-such-node") == (
            404, "no machine with id or hostname no-such-node")
        coordinator.cli("machines", "label", host, "zone=a")
        wait_until(lambda: "runs again once the operator retries it" in
                   (tmp_path / "agent.log").read_text(), 30, "the agent to see the new generation")
        assert len(events(coordinator, "item")) == 6  # three attempts, each running then failed

        # The operator fixes the cause and retries: the same agent runs it again, to Ready.
        (tmp_path / "root" / "app.conf").write_text("ok\n")
        retried = coordinator.cli("machines", "retry", host).stdout
        assert retried.strip() == f"{host}: app-config runs again (retry 1)"
        coordinator.wait_state(host, "Ready", timeout=60)
        assert agent.is_running()
        (retry,) = events(coordinator, "retry")
        assert retry["message"] == (f"{host}: the operator retries app-config, which its agent "
                                    "gave up on after 3 attempts (retry 1)")
        again = coordinator.cli("machines", "retry", host, ok=False)
        assert f"{host}: nothing to retry: no item was given up" in again.stderr
        assert refusal(coordinator, host) == (409, f"{host}: nothing to retry: no item was "
                                                   "given up")
