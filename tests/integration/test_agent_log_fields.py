"""One name, one meaning in the agent's log lines: `attempt=` is an item's run attempt, as
`machines logs` shows it, and a call that did not reach the coordinator counts `failures=`
(against a loopback port nothing listens on)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nodeagent.client import CoordinatorClient
from nodeagent.identity import Identity
from nodeagent.reporter import Reporter
from nodeagent.wire.endpoint import Endpoint
from nodeagent.wire.logfmt import LogfmtFormatter
from tests.support.ports import free_port
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.integration


async def test_a_report_held_back_keeps_the_items_attempt_apart_from_the_failed_calls(
        caplog: pytest.LogCaptureFixture) -> None:
    client = CoordinatorClient([Endpoint(f"http://127.0.0.1:{free_port()}")], timeout=2)
    reporter = Reporter(client, Identity("m-1", "credential"))
    caplog.set_level(logging.INFO, logger="nodeagent")
    reporter.submit({"item": "runtime", "phase": "prepare", "status": "failed", "attempt": 3,
                     "started_at": 1.0, "finished_at": 2.0, "exit_code": 100,
                     "error": "exit status 100"})
    delivering = asyncio.create_task(reporter.run())
    try:
        async def held_back_twice() -> bool:
            return sum("held back" in r.getMessage() for r in caplog.records) >= 2

        await wait_until_async(held_back_twice, 10, "the report held back twice")
    finally:
        delivering.cancel()
    formatter = LogfmtFormatter()
    failed, *held = [formatter.format(r) for r in caplog.records]
    assert "attempt=3 " in failed
    assert ["failures=1" in held[0], "failures=2" in held[1]] == [True, True], held
    assert not any("attempt=" in line for line in held), held
