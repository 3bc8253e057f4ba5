"""A real `coordinator serve` over TLS on 127.0.0.1 and real `nodeagent run` processes: the
agent trusts only the CA its join string pins, and rotates its credential before it expires."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli.client import ClientError
from nodeagent.wire import joinstring
from tests.support.builders import NOOP_CLUSTER
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[ServedCoordinator]:
    with running_coordinator(tmp_path, NOOP_CLUSTER, ["--credential-ttl", "6s"]) as served:
        yield served


def join_string(coordinator: ServedCoordinator) -> str:
    return str(coordinator.admin.request("POST", "/v1/clusters/lab/join-tokens",
                                         body={"ttl": "1h"})["join"])


def agent_config(tmp: Path, join: str, name: str) -> Path:
    config = tmp / f"{name}.yaml"
    config.write_text(json.dumps({"join": join, "stateDir": str(tmp / name),
                                  "heartbeatSeconds": 0.5, "ignorePrechecks": ["all"]}))
    return config


def test_an_agent_refuses_a_coordinator_whose_ca_is_not_the_pinned_one(
        coordinator: ServedCoordinator, tmp_path: Path) -> None:
    good = joinstring.decode(join_string(coordinator))
    forged = joinstring.JoinString(good.url, good.token, "sha256:" + "0" * 64).encode()
    result = subprocess.run([str(BIN / "nodeagent"), "run", "--config",
                             str(agent_config(tmp_path, forged, "forged"))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "refusing to trust it. Either the join string is wrong (check join: in the " \
        "agent's config against the string `coordinator join-token create CLUSTER` " \
        "printed" in result.stderr, result.stderr
    assert good.ca_hash in result.stderr  # it says what it was shown
    assert not (tmp_path / "forged" / "ca.crt").exists()
    assert coordinator.admin.all_machines() == []  # the token was never sent


def test_an_agent_whose_join_token_was_revoked_is_told_to_create_a_new_one(
        coordinator: ServedCoordinator, tmp_path: Path) -> None:
    """There is no machine nor identity.json yet: the way out is a new join token, not a
    reissue of a machine."""
    token = coordinator.admin.request("POST", "/v1/clusters/lab/join-tokens", body={"ttl": "1h"})
    coordinator.admin.request("DELETE", f"/v1/join-tokens/{token['id']}")
    result = subprocess.run([str(BIN / "nodeagent"), "run", "--config",
                             str(agent_config(tmp_path, token["join"], "node"))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"join token {token['id']} revoked" in result.stderr, result.stderr
    assert "Create a new one, `coordinator join-token create CLUSTER` on the coordinator, " \
        "set join: to the string it prints" in result.stderr
    assert "machines reissue" not in result.stderr and "identity.json" not in result.stderr
    assert coordinator.admin.all_machines() == []


def test_an_agent_trusts_the_pinned_ca_and_rotates_its_credential_before_expiry(
        coordinator: ServedCoordinator, tmp_path: Path) -> None:
    config = agent_config(tmp_path, join_string(coordinator), "node")
    agent = subprocess.Popen([str(BIN / "nodeagent"), "run", "--config", str(config)],
                             stdout=(tmp_path / "agent.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        identity_file = tmp_path / "node" / "identity.json"
        wait_until(identity_file.exists, 60, "registration")
        first = json.loads(identity_file.read_text())
        assert (tmp_path / "node" / "ca.crt").read_text() == coordinator.ca_file.read_text()
        # Issued for 6 s, rotated at 2/3 of that; wait past the first credential's expiry.
        wait_until(lambda: json.loads(identity_file.read_text())["credential"]
                   != first["credential"],
                   30, "rotation")
        time.sleep(max(0.0, first["expires_at"] - time.time()) + 1)
        (machine,) = coordinator.admin.all_machines()
        assert machine["responding"] and time.time() - machine["last_seen"] < 3
        old = coordinator.client(first["credential"])
        with pytest.raises(ClientError) as refused:
            old.request("POST", f"/v1/agent/machines/{first['machine_id']}/heartbeat")
        assert refused.value.status == 401
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_an_agent_waits_for_a_coordinator_that_is_not_up_yet_then_registers(
        coordinator: ServedCoordinator, tmp_path: Path) -> None:
    """Started before its coordinator (a power cut, a fresh lab), the agent neither exits nor
    hammers: it says at each attempt that it waits for the CA, then registers once it answers."""
    config = agent_config(tmp_path, join_string(coordinator), "node")
    coordinator.stop()
    log = tmp_path / "agent.log"
    agent = subprocess.Popen([str(BIN / "nodeagent"), "run", "--config", str(config)],
                             stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        waiting = f"fetch the coordinator's CA: coordinator {coordinator.url} unreachable ("
        wait_until(lambda: log.read_text().count(waiting) >= 3, 30, "three announced retries")
        assert agent.poll() is None, log.read_text()
        assert "; retrying in " in log.read_text()
        coordinator.start()
        wait_until((tmp_path / "node" / "identity.json").exists, 60, "registration")
        (machine,) = coordinator.admin.all_machines()
        assert machine["state"] == "Pending"

        coordinator.stop()  # later steps wait it out too, saying so
        for step in ("heartbeat", "fetch assignment"):
            wait_until(lambda step=step: f"{step}: coordinator {coordinator.url} unreachable ("
                       in log.read_text(), 30, f"{step} retried")
        assert agent.poll() is None, log.read_text()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
