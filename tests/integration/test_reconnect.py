"""Agents ride out a coordinator restart: real `nodeagent run` daemons against a real
`coordinator serve` (SQLite) on loopback. Killed and served again from the same data dir on
the same port, the coordinator has every agent's long-poll parked again within about two
seconds of answering, however many times the agents failed to reach it meanwhile; any call
answered (a heartbeat's too) starts the next outage from the first, shortest wait."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from nodeagent.client import CoordinatorClient, Held, Unreachable
from nodeagent.wire.endpoint import Endpoint
from tests.support.agent import AgentProcess, joined_agent
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.metrics import polls_parked
from tests.support.ports import free_port
from tests.support.requirements import require_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AGENTS = 4
# Long enough for backoff that doubles with each failure to reach steps of 8-16 s.
OUTAGE_SECONDS = 12.0
BACK_WITHIN_SECONDS = 3.0  # about two seconds, with room for a shared 2-core machine


@contextlib.contextmanager
def agents(served: ServedCoordinator, tmp: Path, count: int) -> Iterator[list[AgentProcess]]:
    """count agents with join strings, each registered and its long-poll parked when
    yielded (root: each has a hostname of its own)."""
    require_root()
    started = []
    try:
        for index in range(count):
            started.append(joined_agent(served, tmp / f"agent-{index}", f"node-{index}"))
        wait_until(lambda: polls_parked(served) == count, 90, "every agent's long-poll",
                   interval=0.2)
        yield started
    finally:
        for agent in started:
            agent.stop()


def test_every_agent_polls_again_within_two_seconds_of_a_restarted_coordinator(
        tmp_path: Path) -> None:
    with running_coordinator(tmp_path) as served, agents(served, tmp_path, AGENTS) as fleet:
        served.stop(crash=True)
        time.sleep(OUTAGE_SECONDS)
        served.start()
        answering = time.monotonic()
        wait_until(lambda: polls_parked(served) == AGENTS, 60, "the long-polls again",
                   interval=0.05)
        back = time.monotonic() - answering
        logs = "\n".join(agent.log.read_text()[-600:] for agent in fleet)
        assert back <= BACK_WITHIN_SECONDS, (
            f"the agents took {back:.1f}s to poll again after the coordinator answered\n{logs}")
        # Each wait said how many calls had failed since the coordinator last answered.
        assert "failures=" in logs and "attempt=" not in logs, logs


async def test_a_heartbeat_answered_starts_the_next_outage_from_the_shortest_wait() -> None:
    """The long-poll's waits and the heartbeat share the agent's client: a poll cut just
    after a heartbeat was answered counts as the first failure, whatever came before."""
    port = free_port()
    client = CoordinatorClient([Endpoint(f"http://127.0.0.1:{port}")], timeout=2)
    for _ in range(6):
        with pytest.raises(Unreachable):
            await client.assignment("m-1", "credential", Held(1), 0)
        client.reconnect.failed()
    assert client.reconnect.failures == 6
    async def beat(_: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/agent/machines/m-1/heartbeat", beat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await client.heartbeat("m-1", "credential")
    finally:
        await runner.cleanup()
    assert client.reconnect.failures == 0
    assert client.reconnect.failed() <= 0.5
