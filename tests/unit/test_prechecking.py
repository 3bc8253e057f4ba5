"""What a Pending machine's agent tells the coordinator of its prechecks, and for how long: the
runs are scripted here, the waits between them shortened."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent import prechecking
from nodeagent.children import DaemonSettings
from nodeagent.client import Document, Rejected
from nodeagent.host import Host
from nodeagent.identity import Identity
from nodeagent.prechecking import Prechecks

IDENTITY = Identity("m-1", "machine_secret")
SETTINGS = DaemonSettings(endpoints=[], ca_file=None, ca_hash=None, timeout=1.0,
                          state_dir=Path("/nonexistent"), join_token=None, heartbeat_seconds=1.0,
                          role="worker", ignore_prechecks=[], own_ntp_servers=False,
                          precheck_recheck_seconds=0.004)


class Coordinator:
    """Takes precheck reports (whether each passed) until the machine is approved."""

    def __init__(self, approved_after: int) -> None:
        self.sent: list[bool] = []
        self.approved_after = approved_after
        self.refused = asyncio.Event()

    async def precheck(self, machine_id: str, credential: str, report: Document) -> None:
        if len(self.sent) == self.approved_after:
            self.refused.set()
            raise Rejected(409, "w1 is Prepare: prechecks only matter before approval")
        self.sent.append(report["ok"])


class Scripted(Prechecks):
    """Prechecks whose runs pass or fail as the script says; the run after the last waits
    until it is cancelled."""

    def __init__(self, outcomes: list[bool], coordinator: Coordinator) -> None:
        super().__init__(SETTINGS, Host("/"), "agent.yaml", coordinator,  # type: ignore[arg-type]
                         random.Random(1))
        self.outcomes: Iterator[bool] = iter(outcomes)
        self.runs = 0
        self.stages: list[bool] = []  # whether each run was the one after Prepare
        self.waiting, self.cancelled = asyncio.Event(), asyncio.Event()

    async def run(self, prepared: bool = False) -> Document:
        self.runs += 1
        self.stages.append(prepared)
        for ok in self.outcomes:
            return {"ok": ok}
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.set()
        raise AssertionError("unreachable")


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prechecking, "RECHECK_FIRST_SECONDS", 0.001)


async def test_a_pending_machine_says_each_failure_and_each_recovery_until_it_is_approved() -> None:
    coordinator = Coordinator(approved_after=5)
    prechecks = Scripted([False, False, True, True, True, False, True, False, False], coordinator)
    prechecks.registered(IDENTITY, {"ok": False})
    await asyncio.wait_for(coordinator.refused.wait(), 5)
    await asyncio.sleep(0.05)
    # Passing runs after a passing report say nothing new; the machine was approved after the
    # fifth report: the eighth run's is refused, and it runs no more.
    assert coordinator.sent == [False, False, True, False, True]
    assert prechecks.runs == 8


async def test_every_start_of_a_pending_machines_agent_runs_and_sends_them_at_once() -> None:
    coordinator = Coordinator(approved_after=99)
    prechecks = Scripted([True, True], coordinator)
    prechecks.assigned(IDENTITY, {"state": "Pending"})
    prechecks.assigned(IDENTITY, {"state": "Pending"})  # an assignment later: the same checks
    await asyncio.wait_for(prechecks.waiting.wait(), 5)
    assert coordinator.sent == [True] and prechecks.runs == 3
    prechecks.assigned(IDENTITY, {"state": "Prepare"})  # approved: the checks stop
    await asyncio.wait_for(prechecks.cancelled.wait(), 5)


async def test_after_prepare_the_checks_run_again_with_backoff_until_deploy() -> None:
    """Each report sent after Prepare makes a new assignment of the same phase, applied again:
    that must neither restart the checks (a run and a report at once each time, without
    backoff) nor stop them."""
    coordinator = Coordinator(approved_after=99)
    prechecks = Scripted([True, True, True, True], coordinator)
    prechecks.prepared(IDENTITY)
    for _ in range(20):
        await asyncio.sleep(0.01)
        if coordinator.sent:
            break
    for _ in range(3):
        prechecks.assigned(IDENTITY, {"state": "Prepare"})
        prechecks.prepared(IDENTITY)
        await asyncio.sleep(0.05)
    # it passed: the next runs wait their backoff, and say nothing new
    assert coordinator.sent == [True]
    assert prechecks.stages == [True] * prechecks.runs
    prechecks.assigned(IDENTITY, {"state": "Deploy"})  # admitted: the checks stop
    await asyncio.sleep(0.01)
    assert prechecks._rechecking is not None and prechecks._rechecking.cancelled()
