"""`nodeagent run`: precheck, register, wait for approval, apply assigned items, report.

The agent never decides what to run: it applies the phase the coordinator assigns, in
order, skipping what its journal says is done, and tells the coordinator everything.
When the coordinator is away it keeps working and sends its buffered reports later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import secrets
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from nodeagent import sdnotify, trust
from nodeagent.atomic import atomic_write
from nodeagent.backoff import delay
from nodeagent.client import CoordinatorClient, Endpoint, Rejected, Unreachable
from nodeagent.config import AgentConfig
from nodeagent.host import Host
from nodeagent.items.runner import run_phase
from nodeagent.journal import Journal
from nodeagent.logfmt import fields
from nodeagent.protocol import (
    Assignment,
    ItemReport,
    NtpSettings,
    PrecheckReport,
    RegisterRequest,
    Status,
)
from nodeagent.proxy import proxy_for

T = TypeVar("T")
log = logging.getLogger("nodeagent")
LONG_POLL_SECONDS = 30.0
CHILD_TIMEOUT_SECONDS = 120.0


class AgentError(Exception):
    """A condition the agent cannot recover from by retrying (bad token, removed machine)."""


@dataclass
class Identity:
    """The machine's own credential. Mutable: a rotation updates it in place for every task
    that holds it."""

    machine_id: str
    credential: str
    issued_at: float = 0.0
    expires_at: float | None = None

    def due_for_rotation(self, now: float) -> bool:
        """Two thirds into its life, like kubelet's certificate rotation."""
        if self.expires_at is None:
            return False
        return now >= self.issued_at + (self.expires_at - self.issued_at) * 2 / 3


def load_identity(path: Path) -> Identity | None:
    try:
        data = json.loads(path.read_text())
        return Identity(data["machine_id"], data["credential"], data.get("issued_at", 0.0),
                        data.get("expires_at"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_identity(path: Path, identity: Identity) -> None:
    atomic_write(path, json.dumps(dataclasses.asdict(identity)).encode(), mode=0o600)


class Reporter:
    """Delivers item reports in order; holds them while the coordinator is unreachable."""

    def __init__(self, client: CoordinatorClient, identity: Identity, rand: random.Random) -> None:
        self._client = client
        self._identity = identity
        self._rand = rand
        self._queue: asyncio.Queue[ItemReport] = asyncio.Queue()

    async def submit(self, report: ItemReport) -> None:
        """Queue the report for the coordinator, and log it: every item's start, success and
        failure is also a line in the node's journal."""
        duration = (report.finished_at - report.started_at) if report.finished_at else None
        log.log(logging.WARNING if report.status == "failed" else logging.INFO,
                "item %s", report.status, extra=fields(
                    item=report.item, phase=report.phase, status=report.status,
                    attempt=report.attempt, exit_code=report.exit_code, duration=duration,
                    error=report.error or None))
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
                    log.warning("report of %s held back (%s); retrying", report.item, exc,
                                extra=fields(item=report.item, attempt=attempt))
                    await asyncio.sleep(delay(attempt, 0.5, 15.0, self._rand))
                except Rejected as exc:
                    log.error("coordinator refused the report of %s: %s", report.item, exc)
                    break


class Agent:
    def __init__(self, config: AgentConfig, host: Host, config_path: str | None = None,
                 rand: random.Random | None = None) -> None:
        if not config.coordinator.url:
            raise AgentError("coordinator.url is not set in the config file")
        self.config = config
        self.config_path = config_path
        self.host = host
        self.state_dir = Path(config.state_dir)
        self.rand = rand or random.Random()
        self.client = CoordinatorClient(
            [Endpoint(url, proxy_for(url, config.proxy, os.environ))
             for url in config.coordinator.all_urls],
            timeout=config.coordinator.timeout * 5)
        self.identity_path = self.state_dir / "identity.json"
        self.next_identity_path = self.state_dir / "identity.next.json"
        # The cluster's NTP settings, once an assignment has told them: prechecks use them
        # when this node's config names no NTP servers of its own.
        self.cluster_ntp: NtpSettings | None = None
        self.checked_ntp: NtpSettings | None = None  # what the last precheck used
        self.rechecking: asyncio.Task[None] | None = None

    async def run(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Ready as soon as it runs: registering may wait long for the coordinator, and
        # systemd must neither time the start out nor miss watchdog pings meanwhile.
        sdnotify.ready()
        async with _background(_watchdog()):
            self.client.context = await self._trust()
            identity = await self._settle_rotation(load_identity(self.identity_path))
            if identity is None:
                report = await self._precheck()
                identity = await self._register(report)
                if not report.ok:
                    self._start_recheck(identity, wait_first=True)
            journal = Journal(self.state_dir / "journal.json")
            reporter = Reporter(self.client, identity, self.rand)
            try:
                async with _background(reporter.run(), self._heartbeat(identity)):
                    await self._follow(identity, journal, reporter)
            finally:
                if self.rechecking is not None:
                    self.rechecking.cancel()

    async def _trust(self) -> ssl.SSLContext | None:
        """The TLS context for an https coordinator: its CA from the config, or the one the
        join string pins (fetched and checked once, then kept in the state dir)."""
        url = self.config.coordinator.url or ""
        if not url.startswith("https://"):
            return None
        if self.config.coordinator.ca_file:
            return trust.context_for(Path(self.config.coordinator.ca_file))
        kept = self.state_dir / "ca.crt"
        if not kept.exists():
            pin = self.config.ca_hash
            if pin is None:
                raise AgentError(f"{url} is https but there is no CA to trust: set "
                                 "coordinator.caFile or use a join string (join:)")
            # The replicas share one CA: the first that presents the pinned one will do.
            problems = []
            for endpoint in self.client.endpoints:
                try:
                    await trust.fetch_pinned_ca(endpoint.url, pin, kept, endpoint.proxy,
                                                self.config.coordinator.timeout * 5)
                    break
                except trust.TrustError as exc:
                    problems.append(str(exc))
            else:
                raise AgentError("; ".join(problems))
            log.info("trusting the coordinator's CA %s", pin)
        return trust.context_for(kept)

    async def _settle_rotation(self, identity: Identity | None) -> Identity | None:
        """A rotation cut short (crash, lost answer) left identity.next.json: whichever of the
        two credentials the coordinator accepts is the machine's. While it cannot tell,
        both are kept."""
        pending = load_identity(self.next_identity_path)
        if identity is None or pending is None:
            return identity
        try:
            await self.client.heartbeat(pending.machine_id, pending.credential)
        except Unreachable:
            return identity
        except Rejected:
            self.next_identity_path.unlink(missing_ok=True)
            return identity
        save_identity(self.identity_path, pending)
        self.next_identity_path.unlink(missing_ok=True)
        log.info("credential rotation completed")
        return pending

    async def _rotate(self, identity: Identity) -> None:
        """Choose the next credential and save it before asking, so that a lost answer never
        locks the machine out (see _settle_rotation). Updates identity in place."""
        if self.next_identity_path.exists():
            current = await self._settle_rotation(identity)
        else:
            now = time.time()
            candidate = Identity(identity.machine_id, "machine_" + secrets.token_urlsafe(32), now)
            save_identity(self.next_identity_path, candidate)
            answer = await self.client.rotate(identity.machine_id, identity.credential,
                                              candidate.credential)
            candidate.expires_at = answer.credential_expires_at
            save_identity(self.identity_path, candidate)
            self.next_identity_path.unlink(missing_ok=True)
            current = candidate
            log.info("credential rotated; the new one expires at %s", candidate.expires_at)
        assert current is not None
        identity.credential, identity.issued_at = current.credential, current.issued_at
        identity.expires_at = current.expires_at

    async def _own_command(self, *args: str) -> str:
        """Output of `nodeagent ARGS --root ROOT` in a child process. Prechecks and facts load
        DNS, netlink, NTP and process-table libraries the idle daemon has no use for; in a
        child they give their memory back when it exits."""
        argv = [*_own_argv(), *args, "--root", str(self.host.root)]
        try:
            result = await self.host.run(argv, timeout=CHILD_TIMEOUT_SECONDS)
        except TimeoutError:
            raise AgentError(f"`nodeagent {args[0]}` did not finish within "
                             f"{CHILD_TIMEOUT_SECONDS:.0f}s") from None
        if result.returncode not in (0, 1):
            raise AgentError(f"`nodeagent {args[0]}` failed (exit {result.returncode}): "
                             f"{result.stderr.strip()}")
        return result.stdout

    async def _precheck(self) -> PrecheckReport:
        args = ["precheck", "--output", "json", "--role", self.config.role]
        if self.config_path:
            args += ["--config", self.config_path]
        if self.config.ignore_prechecks:
            args += ["--ignore", ",".join(self.config.ignore_prechecks)]
        self.checked_ntp = self._ntp_for_checks()
        if self.checked_ntp is not None:
            for server in self.checked_ntp.servers:
                args += ["--ntp-server", server]
            args += ["--max-skew-seconds", f"{self.checked_ntp.max_skew_seconds:g}"]
        report = PrecheckReport.model_validate_json(await self._own_command(*args))
        failures = [f"{c.name}: {c.message}" for c in report.checks if c.status is Status.FAIL]
        if failures:
            log.warning("hard prechecks failed: %s", "; ".join(failures))
        sdnotify.status("prechecks " + ("passed" if report.ok else "FAILED"))
        return report

    async def _register(self, report: PrecheckReport) -> Identity:
        if not self.config.join_token:
            raise AgentError("not registered yet and no joinToken in the config file")
        facts = json.loads(await self._own_command("facts", "--output", "json"))
        request = RegisterRequest(join_token=self.config.join_token, hostname=report.hostname,
                                  ip=facts.get("primary_ip"), facts=facts, precheck=report)
        response = await self._retry("register", partial(self.client.register, request))
        identity = Identity(response.machine_id, response.credential, time.time(),
                            response.credential_expires_at)
        save_identity(self.identity_path, identity)
        log.info("registered as machine %s", identity.machine_id,
                 extra=fields(machine=identity.machine_id, hostname=report.hostname))
        return identity

    def _ntp_for_checks(self) -> NtpSettings | None:
        """The cluster's NTP settings when the clock check should use them (this node's
        config names no servers); None: the config's own."""
        if self.config.ntp.servers or self.cluster_ntp is None or not self.cluster_ntp.servers:
            return None
        return self.cluster_ntp

    def _start_recheck(self, identity: Identity, wait_first: bool) -> None:
        if self.rechecking is not None:
            self.rechecking.cancel()
        self.rechecking = asyncio.create_task(self._recheck(identity, wait_first))

    async def _recheck(self, identity: Identity, wait_first: bool) -> None:
        """Re-run prechecks until they pass, so a fixed node becomes approvable without a
        restart. Stops once the machine has left Pending."""
        attempt = 0
        while True:
            if wait_first:
                attempt += 1
                await asyncio.sleep(delay(attempt, 5.0, 60.0, self.rand))
            wait_first = True
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
                        f"{self.identity_path} to register again") from exc
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
                self.cluster_ntp = assignment.ntp
                if assignment.state == "Pending" and self._ntp_for_checks() != self.checked_ntp:
                    # Registered with the node's own (or no) NTP servers: the clock must also
                    # agree with the cluster's before the machine can be approved.
                    self._start_recheck(identity, wait_first=False)
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
                         assignment.state, assignment.phase, len(assignment.items),
                         extra=fields(generation=generation, state=assignment.state,
                                      phase=assignment.phase, items=len(assignment.items)))
                work = asyncio.create_task(run_phase(
                    assignment.items, assignment.values, journal, reporter.submit,
                    assignment.retry, self.host.root,
                    partial(self.client.artifact, identity.credential),
                    self.config.proxy.over(assignment.proxy), self.rand))
        finally:
            if work is not None:
                work.cancel()

    async def _heartbeat(self, identity: Identity) -> None:
        while True:
            with contextlib.suppress(Unreachable, Rejected):
                if identity.due_for_rotation(time.time()):
                    await self._rotate(identity)
                await self.client.heartbeat(identity.machine_id, identity.credential)
            await asyncio.sleep(self.config.heartbeat_seconds)


def _own_argv() -> list[str]:
    """How to run this agent's own command line: a frozen bundle is its own executable."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "nodeagent"]


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
