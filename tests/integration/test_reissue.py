"""`coordinator machines reissue`: a real `nodeagent run` whose credential was revoked gets a
new one bound to the same machine record (id, items, history, and its journal on the node:
nothing applied runs again) with a one-use join string, and
the string is refused once used, once expired, and on another node."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli.client import ClientError
from tests.support.agent import AgentProcess
from tests.support.builders import AUTO_APPROVE_CLUSTER, credential, registration
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

HOST = socket.gethostname()  # the kernel's: what the agent registers as


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path / "node")
    passing_root(agent.root, HOST)
    yield agent
    if agent.process is not None and agent.process.poll() is None:
        agent.stop()


def refusal(coordinator: ServedCoordinator, token: str, hostname: str) -> tuple[int, str]:
    """The status and message a registration with token from hostname gets."""
    with pytest.raises(ClientError) as refused:
        coordinator.client(token).request(
            "POST", "/v1/agent/register",
            body={**registration(hostname, token), "credential": credential(hostname + token)})
    return refused.value.status, str(refused.value)


def reissue(coordinator: ServedCoordinator, *args: str) -> str:
    """The join string `machines reissue` prints (its token inside is what registers)."""
    result = coordinator.cli("machines", "reissue", HOST, *args)
    assert "credential revoked" in result.stderr
    return result.stdout.strip()


def token_of(join: str) -> str:
    from nodeagent.wire import joinstring

    return joinstring.decode(join).token


def test_a_revoked_machine_rejoins_as_the_same_record_with_a_reissued_string(
        tmp_path: Path, node: AgentProcess) -> None:
    with running_coordinator(tmp_path, AUTO_APPROVE_CLUSTER) as coordinator:
        join = coordinator.cli("join-token", "create", "lab").stdout.strip()
        node.configure(f"join: {join}\nheartbeatSeconds: 1\nignorePrechecks: [all]")
        node.start()
        wait_until(lambda: coordinator.admin.all_machines(), 60, "the registration")
        coordinator.wait_state(HOST, "Ready", timeout=60)
        before = coordinator.admin.get(f"/v1/machines/{HOST}")
        history = coordinator.admin.get(f"/v1/events?machine={before['id']}")

        coordinator.cli("revoke", HOST)
        assert node.process is not None
        assert node.process.wait(timeout=60) != 0  # refused: it stops, saying what to do
        assert f"run `coordinator machines reissue {before['id']}`" in node.log.read_text()

        string = reissue(coordinator, "--ttl", "10m")
        assert string.startswith("na1.")
        token = token_of(string)
        status, message = refusal(coordinator, token, "another-node")
        assert status == 403 and f"bound to machine {HOST}" in message, message

        # On the node: the printed string as its join string, the refused identity gone.
        journal = json.loads((node.state_dir / "journal.json").read_text())
        assert journal["machine_id"] == before["id"] and journal["applied"]
        (node.state_dir / "identity.json").unlink()
        node.configure(f"join: {string}\nheartbeatSeconds: 1\nignorePrechecks: [all]")
        node.start()
        wait_until(lambda: coordinator.admin.get(f"/v1/machines/{HOST}")["credential"]
                   ["reissue_used_at"], 60, "the rejoin")
        wait_until(lambda: coordinator.admin.get(f"/v1/machines/{HOST}")["responding"], 30,
                   "heartbeats from the new credential")
        coordinator.wait_state(HOST, "Ready", timeout=30)
        # The same machine: its journal is kept, so nothing it applied runs again.
        assert json.loads((node.state_dir / "journal.json").read_text())["applied"] \
            == journal["applied"]
        assert not list(node.state_dir.glob("journal.*.json"))
        assert "set aside" not in node.log.read_text()
        after = coordinator.admin.all_machines()
        assert [m["id"] for m in after] == [before["id"]]
        assert after[0]["progress"] == before["progress"]
        events = coordinator.admin.get(f"/v1/events?machine={before['id']}")
        assert [e["id"] for e in events[:len(history)]] == [e["id"] for e in history]
        kinds = [e["kind"] for e in events]
        assert kinds.count("registered") == 1 and "reissued" in kinds and "rejoined" in kinds
        logs = (tmp_path / "coordinator.log").read_text() + node.log.read_text()
        assert token not in str(events) and token not in logs and string not in logs
        assert node.process.poll() is None

        status, message = refusal(coordinator, token, HOST)
        assert status == 401 and "was used at" in message, message

        expiring = token_of(reissue(coordinator, "--ttl", "1s"))
        time.sleep(1.5)  # past the token's 1 s
        status, message = refusal(coordinator, expiring, HOST)
        assert status == 401 and "expired" in message, message
        status, message = refusal(coordinator, token, HOST)  # the older one: replaced
        assert status == 401 and "replaced by a newer one" in message, message
        bad = coordinator.cli("machines", "reissue", HOST, "--ttl", "0", ok=False)
        assert bad.returncode == 2 and "ttl" in bad.stderr, bad.stderr
