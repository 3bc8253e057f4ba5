"""`nodeagent run`: precheck, register, wait for approval, apply assigned items, report.

The agent never decides what to run: it applies the phase the coordinator assigns, in
order, skipping what its journal says is done, and tells the coordinator everything.
When the coordinator is away it keeps working and sends its buffered reports later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from nodeagent import sdnotify
from nodeagent.atomic import atomic_write
from nodeagent.backoff import delay
from nodeagent.client import CoordinatorClient, Rejected, Unreachable
from nodeagent.config import AgentConfig
from nodeagent.facts import collect
from nodeagent.host import Host
from nodeagent.items.runner import run_phase
from nodeagent.journal import Journal
from nodeagent.prechecks import CHECKS, NAMES
from nodeagent.prechecks.base import CheckContext
from nodeagent.prechecks.runner import resolve_ignores, run_checks
from nodeagent.protocol import Assignment, ItemReport, PrecheckReport, RegisterRequest, Status
from nodeagent.proxy import proxy_for

T = TypeVar("T")
log = logging.getLogger("nodeagent")
LONG_POLL_SECONDS = 30.0


class AgentError(Exception):
    """A condition the agent cannot recover from by retrying (bad token, removed machine)."""


@dataclass(frozen=True)
class Identity:
    machine_id: str
    credential: str


def load_identity(state_dir: Path) -> Identity | None:
    try:
        data = json.loads((state_dir / "identity.json").read_text())
        return Identity(data["machine_id"], data["credential"])
    except (OSError, ValueError, KeyError):
        return None


def save_identity(state_dir: Path, identity: Identity) -> None:
    atomic_write(state_dir / "identity.json",
                 json.dumps({"machine_id": identity.machine_id,
                             "credential": identity.credential}).encode(), mode=0o600)


class Reporter:
    """Delivers item reports in order; holds them while the coordinator is unreachable."""

    def __init__(self, client: CoordinatorClient, identity: Identity, rand: random.Random) -> None:
        self._client = client
        self._identity = identity
        self._rand = rand
        self._queue: asyncio.Queue[ItemReport] = asyncio.Queue()

    async def submit(self, report: ItemReport) -> None:
        self._queue.put_nowait(report)

    async def run(self) -> None:
        while True:
            report = await self._queue.get()
            attempt = 0
            while True:
                try:
                    await self._client.report(self._identity.machine_id,
                                              self._identity.credential, report)
                    break
                except Unreachable as exc:
                    attempt += 1
                    log.warning("report of %s held back (%s); retrying", report.item, exc)
                    await asyncio.sleep(delay(attempt, 0.5, 15.0, self._rand))
                except Rejected as exc:
                    log.error("coordinator refused the report of %s: %s", report.item, exc)
                    break


class Agent:
    def __init__(self, config: AgentConfig, host: Host, rand: random.Random | None = None) -> None:
        if not config.coordinator.url:
            raise AgentError("coordinator.url is not set in the config file")
        self.config = config
        self.host = host
        self.state_dir = Path(config.state_dir)
        self.rand = rand or random.Random()
        proxy = proxy_for(config.coordinator.url, config.proxy, os.environ)
        self.client = CoordinatorClient(config.coordinator.url, proxy,
                                        timeout=config.coordinator.timeout * 5)

    async def run(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Ready as soon as it runs: registering may wait long for the coordinator, and
        # systemd must neither time the start out nor miss watchdog pings meanwhile.
        sdnotify.ready()
        async with self.client, _background(_watchdog()):
            rechecks: list[Coroutine[Any, Any, None]] = []
            identity = load_identity(self.state_dir)
            if identity is None:
                report = await self._precheck()
                identity = await self._register(report)
                if not report.ok:
                    rechecks.append(self._recheck(identity))
            journal = Journal(self.state_dir / "journal.json")
            reporter = Reporter(self.client, identity, self.rand)
            async with _background(reporter.run(), self._heartbeat(identity), *rechecks):
                await self._follow(identity, journal, reporter)

    async def _precheck(self) -> PrecheckReport:
        ignored = resolve_ignores(self.config.ignore_prechecks, NAMES)
        ctx = CheckContext(self.host, self.config, self.config.role)
        report = await run_checks(CHECKS, ctx, ignored)
        failures = [f"{c.name}: {c.message}" for c in report.checks if c.status is Status.FAIL]
        if failures:
            log.warning("hard prechecks failed: %s", "; ".join(failures))
        sdnotify.status("prechecks " + ("passed" if report.ok else "FAILED"))
        return report

    async def _register(self, report: PrecheckReport) -> Identity:
        if not self.config.join_token:
            raise AgentError("not registered yet and no joinToken in the config file")
        facts = await asyncio.to_thread(collect, self.host)
        request = RegisterRequest(join_token=self.config.join_token, hostname=report.hostname,
                                  ip=facts.get("primary_ip"), facts=facts, precheck=report)
        response = await self._retry("register", partial(self.client.register, request))
        identity = Identity(response.machine_id, response.credential)
        save_identity(self.state_dir, identity)
        log.info("registered as machine %s", identity.machine_id)
        return identity

    async def _recheck(self, identity: Identity) -> None:
        """Re-run failed prechecks until they pass, so a fixed node becomes approvable
        without a restart. Stops once the machine has left Pending."""
        attempt = 0
        while True:
            attempt += 1
            await asyncio.sleep(delay(attempt, 5.0, 60.0, self.rand))
            report = await self._precheck()
            try:
                await self.client.precheck(identity.machine_id, identity.credential, report)
            except Rejected:
                return  # approved meanwhile, or removed
            except Unreachable:
                continue
            if report.ok:
                return

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Call until the coordinator answers; a refusal is final."""
        attempt = 0
        while True:
            try:
                return await call()
            except Unreachable as exc:
                attempt += 1
                wait = delay(attempt, 0.5, 30.0, self.rand)
                log.warning("%s: coordinator unreachable (%s); retrying in %.1fs", what, exc, wait)
                sdnotify.status(f"coordinator unreachable; retrying {what}")
                await asyncio.sleep(wait)
            except Rejected as exc:
                if exc.status == 401:
                    raise AgentError(
                        f"{what}: the coordinator does not know this machine's credential "
                        f"({exc}); it was deleted or the state dir is stale. Remove "
                        f"{self.state_dir / 'identity.json'} to register again") from exc
                raise AgentError(f"{what}: {exc}") from exc

    async def _follow(self, identity: Identity, journal: Journal, reporter: Reporter) -> None:
        """Long-poll the assignment; restart the phase whenever what to run changes."""
        generation = 0
        current: tuple[Any, ...] | None = None
        work: asyncio.Task[bool] | None = None
        try:
            while True:
                assignment = await self._retry("fetch assignment", partial(
                    self.client.assignment, identity.machine_id, identity.credential,
                    generation, LONG_POLL_SECONDS))
                if assignment.generation == generation:
                    continue
                generation = assignment.generation
                wanted = _work_key(assignment)
                sdnotify.status(f"{assignment.state}: {len(assignment.items)} items")
                if wanted == current and work is not None and not work.done():
                    continue  # same phase, same items: let the running phase go on
                if work is not None:
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                current = wanted
                log.info("assignment %d: %s, phase %s, %d items", generation,
                         assignment.state, assignment.phase, len(assignment.items))
                work = asyncio.create_task(run_phase(
                    assignment.items, assignment.values, journal, reporter.submit,
                    assignment.retry, self.host.root,
                    partial(self.client.artifact, identity.credential), self.rand))
        finally:
            if work is not None:
                work.cancel()

    async def _heartbeat(self, identity: Identity) -> None:
        while True:
            with contextlib.suppress(Unreachable, Rejected):
                await self.client.heartbeat(identity.machine_id, identity.credential)
            await asyncio.sleep(self.config.heartbeat_seconds)


async def _watchdog() -> None:
    interval = sdnotify.watchdog_interval()
    if interval is None:
        return
    while True:
        sdnotify.watchdog()
        await asyncio.sleep(interval)


def _work_key(assignment: Assignment) -> tuple[Any, ...]:
    """What makes a running phase obsolete: another phase or other items. Changed values
    (e.g. a new manager's address) reach the next phase; Reconfigure exists to apply them."""
    return (assignment.phase, tuple(i.fingerprint() for i in assignment.items))


@contextlib.asynccontextmanager
async def _background(*coros: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
