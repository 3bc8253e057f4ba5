"""A restore of an older backup puts a machine's generation back: the agent polling with what
it held before is answered at once with what the restored coordinator holds (not after a whole
poll), and once the restored coordinator reaches the agent's generation again with other
content, the agent's old tag does not match it (domain/assignments/etags.py). The agent's own client
against `coordinator serve` processes; a pending machine, whose generation only its labels
move."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import pytest

from nodeagent.client import CoordinatorClient, Document, Held
from nodeagent.wire.endpoint import Endpoint
from tests.support.driver import Registered
from tests.support.harness import ServedCoordinator, restore, running_coordinator

pytestmark = pytest.mark.integration

WAIT = 20.0  # each poll's wait: answered well before it, it was not parked
AT_ONCE = 3.0


def poll(client: CoordinatorClient, agent: Registered, held: Held,
         wait: float = WAIT) -> tuple[tuple[Document, Held] | None, float]:
    """The agent's long-poll: its answer, and how long it took."""
    started = time.monotonic()
    answer = asyncio.run(client.assignment(agent["machine_id"], agent["credential"], held, wait))
    return answer, time.monotonic() - started


def answered(client: CoordinatorClient, agent: Registered, held: Held) -> tuple[Document, Held]:
    """A poll answered at once with an assignment."""
    answer, took = poll(client, agent, held)
    assert answer is not None and took < AT_ONCE, (answer, took)
    return answer


def labels(assignment: Document) -> str:
    return str(assignment["values"]["machine.labels"])


def test_after_a_restore_an_agent_ahead_or_holding_a_reused_generation_is_answered_at_once(
        tmp_path: Path) -> None:
    archive = tmp_path / "backup.tgz"
    with running_coordinator(tmp_path / "a") as source:
        agent = source.register("node-1")
        client = CoordinatorClient([Endpoint(source.url)], timeout=10, context=ssl.
                                   create_default_context(cafile=str(source.ca_file)))
        backed_up, held = answered(client, agent, Held())
        source.cli("backup", "--out", str(archive))
        source.cli("machines", "label", "node-1", "zone=a")  # one generation more
        later, ahead = answered(client, agent, held)
        assert ahead.generation == held.generation + 1 and labels(later) != labels(backed_up)
        token = source.token_file.read_text()
        source.stop()

    data = tmp_path / "b" / "coordinator-data"
    done = restore(archive, data)
    assert done.returncode == 0, done.stderr
    (data / "admin.token").write_text(token)
    again = ServedCoordinator(source.url, data, tmp_path / "b" / "coordinator.log")
    again.start()
    try:
        # One generation ahead of the restored machine: told at once what it is now.
        restored, behind = answered(client, agent, ahead)
        assert behind.generation == held.generation and labels(restored) == labels(backed_up)
        # The restored coordinator reaches the agent's old generation with other content:
        # the tag the agent held before the restore does not match it.
        again.cli("machines", "label", "node-1", "zone=b")
        relabelled, current = answered(client, agent, ahead)
        assert current.generation == ahead.generation and current != ahead
        assert labels(relabelled) not in (labels(later), labels(backed_up))
        # What it holds now is current: its poll waits, and says nothing new.
        assert poll(client, agent, current, wait=1)[0] is None
    finally:
        again.stop()
