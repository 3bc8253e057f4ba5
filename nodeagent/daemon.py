"""`nodeagent run`: precheck, register, wait for approval, have assigned items applied, report.

The agent never decides what to run: it applies the phase the coordinator assigns, in
order, skipping what its journal says is done, and tells the coordinator everything.
When the coordinator is away it keeps working and sends its buffered reports later.

This process stays up on every node, so it is a small supervisor: it long-polls,
heartbeats, rotates the credential and delivers reports, reading only the few raw JSON
fields it needs. All that needs the validated wire types (pydantic), YAML or the item code
runs in a child, its own command line, which gives its memory back when it exits:
`check-config --output json` (the config file, with file:line:field errors), `precheck`,
`facts`, and `apply` (one phase's items, nodeagent/phase.py): see children.py.
docs/benchmarks.md has why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from nodeagent import sdnotify, trust
from nodeagent.backoff import delay
from nodeagent.children import (
    EXIT_APPLIED,
    EXIT_GAVE_UP,
    AgentError,
    DaemonSettings,
    apply_phase,
    checked_output,
    load_settings,
)
from nodeagent.client import Busy, CoordinatorClient, Document, Held, Rejected, Unreachable
from nodeagent.home import Place, load_home
from nodeagent.host import Host
from nodeagent.identity import (
    IDENTITY_FILE,
    NEXT_IDENTITY_FILE,
    REGISTRATION_FILE,
    Identity,
    load_identity,
    new_credential,
    registration_credential,
    save_identity,
)
from nodeagent.kubeconfigs import KubeconfigWatch
from nodeagent.pacing import PollPace
from nodeagent.prechecking import Prechecks
from nodeagent.removal import forget_machine
from nodeagent.reporter import Reporter
from nodeagent.retarget import Retarget
from nodeagent.statelock import lock_state_dir
from nodeagent.wire import addresses, joinstring
from nodeagent.wire.logfmt import fields

T = TypeVar("T")
log = logging.getLogger("nodeagent")
# Where long-polls count as heartbeats (wire/heartbeat.py) one goes out every heartbeat interval
# at least (pacing.py), plus the time to answer it: a separate heartbeat follows only once one
# is half an interval late.
POLL_SLACK = 1.5


def unauthorized(what: str, refusal: Rejected, joining: str | None, machine: str | None,
                 config_path: str | Path, identity_path: Path) -> str:
    """What a 401 means and the operator's way out. Registering (joining: the token of the
    config's join string) there is no machine yet: a refused join token is replaced by a new
    one, a refused reissue string by another reissue of its machine. Otherwise the credential
    of machine (its id) was refused: a reissue keeps its record."""
    if joining is not None and (bound := joinstring.reissued_machine(joining)) is not None:
        return (f"{what}: the coordinator refused the reissue string in {config_path} "
                f"({refusal}). Run `coordinator machines reissue {bound}` for a new one, set "
                "join: to the string it prints and start again")
    if joining is not None:
        return (f"{what}: the coordinator refused the join token of the join string in "
                f"{config_path} ({refusal}). Create a new one, `coordinator join-token create "
                "CLUSTER` on the coordinator, set join: to the string it prints and start "
                "again")
    return (f"{what}: the coordinator does not know the credential of this machine, {machine} "
            f"({refusal}); it was revoked, or the state dir is stale. To keep the machine's "
            f"record, run `coordinator machines reissue {machine}`, set join: in {config_path} "
            f"to the string it prints, remove {identity_path} and start again")


class MachineRemoved(AgentError):
    """The coordinator says this machine was deleted (410): what the agent kept of it is
    forgotten, and it stops until started again (which registers a new machine) rather than
    registering again by itself, in a loop, a node the operator took out."""


async def run_agent(config_path: str, host: Host) -> None:
    """The daemon's life: ready for systemd at once (registering may wait long for the
    coordinator, and systemd must neither time the start out nor miss watchdog pings
    meanwhile), then the config, then the state dir's lock (statelock.py), then the agent
    until it stops."""
    sdnotify.ready()
    async with _background(_watchdog()):
        settings = await load_settings(config_path, host)
        lock = await lock_state_dir(settings.state_dir)  # before anything there is read
        await Agent(settings, host, config_path, lock=lock).run()


class Agent:
    """The agent of one state dir. lock: the descriptor of that dir's lock, which each
    phase's child inherits (statelock.py); None where nothing else can run on it (benches)."""

    def __init__(self, settings: DaemonSettings, host: Host, config_path: str,
                 rand: random.Random | None = None, lock: int | None = None) -> None:
        self.settings = settings
        self.lock = lock
        self.config_path = config_path
        self.host = host
        self.state_dir = settings.state_dir
        self.rand = rand or random.Random()
        self.home = load_home(self.state_dir)  # where the coordinator moved, if it did
        endpoints = self.home.current.endpoints(settings.endpoints[0].proxy) if self.home \
            else settings.endpoints
        self.client = CoordinatorClient(endpoints, timeout=settings.timeout * 5, rand=self.rand)
        self.identity_path = self.state_dir / IDENTITY_FILE
        self.next_identity_path = self.state_dir / NEXT_IDENTITY_FILE
        self.prechecks = Prechecks(settings, host, config_path, self.client, self.rand)
        self.kubeconfigs = KubeconfigWatch(self.state_dir, host.root)
        self.pace = PollPace(self.rand)

    async def run(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)  # the benches' agents take no lock
        retarget = await self._retarget()
        identity = await self._settle_rotation(load_identity(self.identity_path))
        if identity is None:
            report = await self.prechecks.run()
            identity = await self._register(report)
            self.prechecks.registered(identity, report)
        reporter = Reporter(self.client, identity)
        try:
            async with _background(reporter.run(), self._heartbeat(identity),
                                   retarget.watch(identity), self._watch_kubeconfigs(identity)):
                await self._follow(identity, reporter, retarget)
        except MachineRemoved as removed:
            kept = forget_machine(self.state_dir, identity.machine_id)
            self.kubeconfigs.clear()
            log.error("%s. The agent forgot that machine (its journal is kept as %s) and "
                      "stops: `systemctl restart nodeagent` registers this node again",
                      removed, kept, extra=fields(machine=identity.machine_id))
            raise
        finally:
            self.prechecks.stop()

    async def _retarget(self) -> Retarget:
        """Whom the client talks to and trusts: the coordinator the agent moved to (home.py),
        else the config's, whose CA _trust() settles."""
        if self.home is not None:
            self.client.context = self.home.current.context()
            log.info("following the coordinator at %s (moved there; the config's is not used)",
                     self.client.url, extra=fields(event="retarget", step="restored",
                                                   coordinator=self.client.url))
            origin = self.home.current
        else:
            self.client.context = await self._trust()
            kept = trust.trusted_ca(self.settings.ca_file, self.state_dir)
            origin = Place(tuple(e.url for e in self.client.endpoints),
                           kept.read_text() if self.client.context is not None else None)
        return Retarget(self.client, self.settings, origin, self.home, self.rand)

    async def _trust(self) -> ssl.SSLContext | None:
        """The TLS context for an https coordinator: its CA from the config, or the one the
        join string pins (fetched and checked once, then kept in the state dir). A coordinator
        that does not answer yet is waited for; one presenting another CA stops the agent."""
        url = self.client.url
        if not url.startswith("https://"):
            return None
        kept = trust.trusted_ca(self.settings.ca_file, self.state_dir)
        if not self.settings.ca_file and not kept.exists():
            pin = self.settings.ca_hash
            if pin is None:
                raise AgentError(f"{url} is https but there is no CA to trust: set "
                                 "coordinator.caFile or use a join string (join:)")
            while (unreachable := await self._fetch_ca(pin, kept)) is not None:
                urls = " or ".join(endpoint.url for endpoint in self.client.endpoints)
                await self._wait_out("fetch the coordinator's CA", urls, unreachable)
            log.info("trusting the coordinator's CA %s", pin)
        return trust.context_for(kept)

    async def _fetch_ca(self, pin: str, kept: Path) -> str | None:
        """Keep the pinned CA from the first replica that presents it (they share one): None
        once kept, else why none answered."""
        problems = []
        for endpoint in self.client.endpoints:
            try:
                await trust.fetch_pinned_ca(endpoint.url, pin, kept, endpoint.proxy,
                                            self.settings.timeout * 5)
                return None
            except trust.CAUnreachable as exc:
                problems.append(str(exc))
            except trust.TrustError as exc:
                raise AgentError(str(exc)) from None
        return "; ".join(problems)

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
            candidate = Identity(identity.machine_id, new_credential(), now)
            save_identity(self.next_identity_path, candidate)
            answer = await self.client.rotate(identity.machine_id, identity.credential,
                                              candidate.credential)
            candidate.expires_at = answer.get("credential_expires_at")
            save_identity(self.identity_path, candidate)
            self.next_identity_path.unlink(missing_ok=True)
            current = candidate
            log.info("credential rotated; the new one expires at %s", candidate.expires_at)
        assert current is not None
        identity.credential, identity.issued_at = current.credential, current.issued_at
        identity.expires_at = current.expires_at

    async def _register(self, report: Document) -> Identity:
        """Register with a credential chosen and saved before the first attempt: a retry after
        a lost answer (the coordinator's, or this agent's crash) gets the same machine."""
        if not self.settings.join_token:
            raise AgentError("not registered yet and no joinToken in the config file")
        facts = json.loads(await checked_output(self.host, "facts", "--output", "json"))
        pending = self.state_dir / REGISTRATION_FILE
        request = {"join_token": self.settings.join_token, "hostname": report["hostname"],
                   "ip": self._address(facts), "facts": facts, "precheck": report,
                   "credential": registration_credential(pending)}
        try:
            response = await self._retry("register", partial(self.client.register, request),
                                         joining=self.settings.join_token)
        except AgentError:
            pending.unlink(missing_ok=True)  # refused: the next start chooses anew
            raise
        identity = Identity(response["machine_id"], response["credential"], time.time(),
                            response.get("credential_expires_at"))
        save_identity(self.identity_path, identity)
        pending.unlink(missing_ok=True)
        log.info("registered as machine %s", identity.machine_id,
                 extra=fields(machine=identity.machine_id, hostname=report["hostname"]))
        return identity

    def _address(self, facts: Document) -> str | None:
        """The address to register with: the config's node.interface or node.address, else
        the default-route interface's. One the node does not have stops the agent, naming
        the setting: registering with another would make it a member at the wrong address."""
        node = self.settings
        try:
            return addresses.chosen(facts, "this node", node.node_interface, node.node_address)
        except addresses.AddressError as exc:
            field = "node.interface" if node.node_interface else "node.address"
            raise AgentError(f"{self.config_path}: {field}: {exc}") from None

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]],
                     joining: str | None = None, machine: str | None = None) -> T:
        """Call until the coordinator answers; a refusal is final. joining: the token the
        call registers with; else machine: the machine whose credential it presents."""
        while True:
            url = self.client.url  # the call may move on to another replica
            try:
                return await call()
            except Unreachable as exc:
                await self._wait_out(what, url, exc)
            except Rejected as exc:
                if exc.status == 410:
                    raise MachineRemoved(f"{what}: {exc}") from exc
                if exc.status == 401:
                    raise AgentError(unauthorized(what, exc, joining, machine,
                                                  self.config_path, self.identity_path)) from exc
                raise AgentError(f"{what}: {exc}") from exc

    async def _wait_out(self, what: str, url: str, reason: object) -> None:
        """Say that the coordinator is away and wait (backoff.Reconnect: about 2 s at most
        while it answered less than a minute ago) before trying again: an outage is waited
        out at every step, never a reason to exit."""
        reconnect = self.client.reconnect
        wait = reconnect.failed(busy=isinstance(reason, Busy))
        log.warning("%s: coordinator %s unreachable (%s); retrying in %.1fs", what, url, reason,
                    wait, extra=fields(failures=reconnect.failures))
        sdnotify.status(f"coordinator unreachable; retrying {what}")
        await asyncio.sleep(wait)

    async def _follow(self, identity: Identity, reporter: Reporter, retarget: Retarget) -> None:
        """Long-poll the assignment; restart the phase whenever what to run changes; start
        over at another coordinator whenever retarget moves there."""
        held = Held()
        current: tuple[Any, ...] | None = None
        work: asyncio.Task[int] | None = None
        try:
            while True:
                polled = await _unless(retarget.moved, self._retry(
                    "fetch assignment", partial(self._poll, identity, held),
                    machine=identity.machine_id))
                if retarget.moved.is_set():  # its generations are its own: ask from the start
                    retarget.moved.clear()
                    held = Held()
                    continue
                if polled is None:
                    continue  # nothing new
                assignment, version = polled
                retarget.consider(assignment, identity)
                if version == held:
                    continue  # the same generation of the same store: nothing new
                held = version
                generation = held.generation
                self.prechecks.assigned(identity, assignment)
                wanted = _work_key(assignment)
                items = len(assignment.get("items", []))
                sdnotify.status(f"{assignment['state']}: {items} items")
                if wanted == current and work is not None and not work.done():
                    log.info("assignment %d: same phase and items; the running phase goes on",
                             generation, extra=fields(generation=generation))
                    continue
                if wanted == current and work is not None and _gave_up(work):
                    log.warning("assignment %d: same phase and items; an item of it was given "
                                "up on, and runs again once the operator retries it",
                                generation, extra=fields(generation=generation))
                    continue
                if work is not None:
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                changed, current = wanted != current, wanted
                log.info("assignment %d: %s, phase %s, %d items", generation,
                         assignment["state"], assignment.get("phase"), items,
                         extra=fields(generation=generation, state=assignment["state"],
                                      phase=assignment.get("phase"), items=items))
                if assignment["state"] == "Prepare" and changed:  # checked again once applied
                    self.prechecks.stop()
                work = asyncio.create_task(self._apply(assignment, reporter, identity)) \
                    if items else None
                if work is None and assignment["state"] == "Prepare":
                    self.prechecks.prepared(identity)
        finally:
            retarget.stop()  # a check of a target under way ends with the agent
            if work is not None:
                work.cancel()

    async def _poll(self, identity: Identity, held: Held) -> tuple[Document, Held] | None:
        """One long-poll, parked as pacing.py says where polls count as heartbeats
        (wire/heartbeat.py), else for pacing.LONG_POLL_SECONDS."""
        wait = self.pace.next(self.settings.heartbeat_seconds, self.client.polls_beat)
        started = time.monotonic()
        try:
            polled = await self.client.assignment(identity.machine_id, identity.credential,
                                                  held, wait)
        except Unreachable:
            self.pace.unanswered()
            raise
        self.pace.answered(time.monotonic() - started, wait)
        return polled

    async def _apply(self, assignment: Document, reporter: Reporter, identity: Identity) -> int:
        """Have the phase applied by a `nodeagent apply` child, passing its reports on; its
        exit code. One that neither applied every item nor gave up on one (it crashed, or
        could not read its journal) is started again after a pause: the journal skips what it
        did. A Prepare phase applied starts the prerequisites' checks after it."""
        restarts = 0
        watched = {i["name"]: i["kubeconfigFrom"] for i in assignment.get("items", [])
                   if i.get("kubeconfigFrom")}

        def submit(report: Document) -> None:  # a kubeconfig it carries is watched from now
            if report.get("kubeconfig") is not None and report["item"] in watched:
                self.kubeconfigs.sent(report["item"], report["fingerprint"],
                                      watched[report["item"]], report["kubeconfig"])
            reporter.submit(report)

        while (code := await apply_phase(assignment, self.config_path, self.host.root,
                                          submit, self.lock)) \
                not in (EXIT_APPLIED, EXIT_GAVE_UP):
            restarts += 1
            wait = delay(restarts, 1.0, 60.0, self.rand)
            log.error("`nodeagent apply` exited with %d; starting it again in %.1fs", code,
                      wait, extra=fields(exit_code=code, restarts=restarts))
            await asyncio.sleep(wait)
        if code == EXIT_APPLIED and assignment["state"] == "Prepare":
            self.prechecks.prepared(identity)
        if code == EXIT_GAVE_UP:
            log.warning("phase %s stopped: an item failed retry.maxAttempts times; it runs "
                        "again once the operator retries it (`coordinator machines retry`)",
                        assignment.get("phase"), extra=fields(phase=assignment.get("phase")))
        return code

    async def _heartbeat(self, identity: Identity) -> None:
        """A heartbeat every interval, unless a long-poll the coordinator counts went out
        lately: then the agent holds one connection, not two (wire/heartbeat.py). The first
        waits an interval, by when the first poll has said whether polls count."""
        every = self.settings.heartbeat_seconds
        while True:
            await asyncio.sleep(every)
            url = self.client.url  # the call may move on to another replica
            try:
                with contextlib.suppress(Rejected):  # the long-poll says a credential is refused
                    if identity.due_for_rotation(time.time()):
                        await self._rotate(identity)
                    if not self.client.beat_within(every * POLL_SLACK):
                        await self.client.heartbeat(identity.machine_id, identity.credential)
            except Unreachable as exc:  # said: it may be what moved on to another replica
                log.warning("heartbeat: coordinator %s unreachable (%s); retrying in %gs", url,
                            exc, every)

    async def _watch_kubeconfigs(self, identity: Identity) -> None:
        """At the heartbeat's pace, the kubeconfig files items reported: one changed on disk
        is sent again (kubeconfigs.py). Taken or kept out, it is what was sent from then on;
        one the coordinator no longer wants (the item is not applied in that version any
        more) is forgotten."""
        every = self.settings.heartbeat_seconds
        while True:
            await asyncio.sleep(every)
            try:
                await self._send_changed_kubeconfigs(identity)
            except OSError as exc:  # the state dir (its list) cannot be written: next look
                log.warning("kubeconfig files: cannot keep what was sent (%s)", exc)

    async def _send_changed_kubeconfigs(self, identity: Identity) -> None:
        for entry, text in self.kubeconfigs.changed():
            try:
                answer = await self.client.refresh_kubeconfig(
                    identity.machine_id, identity.credential,
                    {"item": entry.item, "fingerprint": entry.fingerprint, "kubeconfig": text})
            except Unreachable as exc:
                log.warning("kubeconfig of %s changed on disk; not sent yet (%s)", entry.item,
                            exc, extra=fields(item=entry.item))
                break
            except Rejected as exc:
                log.warning("kubeconfig of %s changed on disk; the coordinator refused it, "
                            "no longer watched: %s", entry.item, exc,
                            extra=fields(item=entry.item))
                self.kubeconfigs.forget(entry.item)
                continue
            self.kubeconfigs.sent(entry.item, entry.fingerprint, entry.path, text)
            log.info("kubeconfig of %s changed on disk: sent again (%s)", entry.item,
                     "taken" if answer.get("taken") else "kept out: see its events",
                     extra=fields(item=entry.item))


async def _watchdog() -> None:
    interval = sdnotify.watchdog_interval()
    if interval is None:
        return
    while True:
        sdnotify.watchdog()
        await asyncio.sleep(interval)


def _gave_up(work: asyncio.Task[int]) -> bool:
    """Whether a finished phase stopped because an item failed retry.maxAttempts times."""
    return not work.cancelled() and work.exception() is None and work.result() == EXIT_GAVE_UP


def _work_key(assignment: Document) -> tuple[Any, ...]:
    """What makes a running phase obsolete, or starts one given up on again: another phase or
    other items, i.e. anything about an item but its timeout (what StateItem.fingerprint()
    covers, raw: a field added to items counts here unchanged), another value of a secret the
    items use (a token minted again: the one the phase runs with may have expired or been
    revoked), or a retry the operator ordered (`retries`: the agent alone counts attempts, so
    only a new count tells it to start a given-up item afresh; see coordinator/domain/
    retries.py). Other changed values (e.g. a new manager's address) reach the next phase;
    Reconfigure exists to apply them."""
    items = tuple(json.dumps({k: v for k, v in item.items() if k != "timeout"}, sort_keys=True)
                  for item in assignment.get("items", []))
    values = assignment.get("values", {})
    secrets = tuple(sorted((name, values.get(name)) for name in assignment.get("secrets", [])
                           if any(f"${{{name}}}" in item for item in items)))
    return assignment.get("phase"), items, secrets, assignment.get("retries", 0)


async def _unless(event: asyncio.Event, call: Awaitable[T]) -> T | None:
    """call's result; None, with call cancelled, should event be set first."""
    task = asyncio.ensure_future(call)
    interrupted = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((task, interrupted), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, interrupted):
            pending.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


@contextlib.asynccontextmanager
async def _background(*coros: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
