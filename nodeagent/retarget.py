"""The agent follows its coordinator when it moves (a pivot), told through its own
assignment, never over SSH: when the assignment names a target elsewhere, the agent

1. refuses a target that is not https on every URL or names no CA pin (its credential would
   go out in clear text, or to whoever answers); fetches the target's CA and checks it
   against the pin (a mismatch: it stays, says why, and checks again later: the operator may
   correct the target); every replica of the target is then reached over TLS verified
   against that CA only, so the credential never goes to another;
2. checks that the target knows its credential (a heartbeat there; 401: not yet, e.g. the
   state is still being copied), and stays on the old coordinator, which keeps answering,
   checking again with backoff, until it does;
3. only then saves the target and its CA (home.py) and switches: the next call goes there.
   Identity and journal stay as they are, so nothing runs again.

Should the coordinator it moved to then stop answering for settings.fallback_seconds, it asks
the one it came from: when that one no longer names the target (the move was rolled back),
the agent goes back to it. Each step is logged at INFO with event=retarget."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from nodeagent import trust
from nodeagent.backoff import delay
from nodeagent.children import DaemonSettings
from nodeagent.client import CoordinatorClient, Held, Rejected, Unreachable
from nodeagent.home import (
    Home,
    Place,
    Target,
    elsewhere,
    fallback_due,
    goes_back,
    moved,
    refusal,
    save_home,
    target_of,
)
from nodeagent.identity import Identity
from nodeagent.wire.logfmt import fields

log = logging.getLogger("nodeagent")
CHECK_FIRST, CHECK_CAP = 1.0, 30.0  # seconds between checks of a target not ready yet


class Retarget:
    """Which coordinator the agent's client talks to, and the moves between them."""

    def __init__(self, client: CoordinatorClient, settings: DaemonSettings, origin: Place,
                 home: Home | None, rand: random.Random) -> None:
        self.client = client
        self.settings = settings
        self.home = home
        self.here = home.current if home else origin  # the coordinator talked to
        self.rand = rand
        self.proxy = settings.endpoints[0].proxy  # the config's, for any coordinator
        self.moved = asyncio.Event()  # set on each switch: the long-poll starts again there
        self._pursued: Target | None = None
        self._pursuit: asyncio.Task[None] | None = None

    def consider(self, assignment: Mapping[str, Any], identity: Identity) -> None:
        """An assignment came: pursue the target it names, if elsewhere; drop the pursuit of
        one it no longer names."""
        target = elsewhere(target_of(assignment), self.here.urls)
        if target == self._pursued:
            return
        self.stop()
        if target is not None:
            log.info("assignment names another coordinator: checking it before moving",
                     extra=fields(event="retarget", step="told", target=target.urls[0],
                                  ca_pin=target.ca_pin))
            self._pursued = target
            self._pursuit = asyncio.create_task(self._pursue(target, identity))

    def stop(self) -> None:
        if self._pursuit is not None:
            self._pursuit.cancel()
        self._pursued = self._pursuit = None

    async def _pursue(self, target: Target, identity: Identity) -> None:
        """Check the target until it is ready, then switch to it."""
        attempt = 0
        while (place := await self._ready(target, identity)) is None:
            attempt += 1
            wait = delay(attempt, CHECK_FIRST, CHECK_CAP, self.rand)
            log.info("staying with %s; checking %s again in %.1fs", self.here.urls[0],
                     target.urls[0], wait, extra=fields(event="retarget", step="stay",
                                                        target=target.urls[0], attempt=attempt))
            await asyncio.sleep(wait)
        self._switch(place, "switched")
        self._pursued = self._pursuit = None

    async def _ready(self, target: Target, identity: Identity) -> Place | None:
        """The target as a Place once its CA matches the pin and it knows this machine's
        credential; None (said why) while not."""
        url = target.urls[0]
        if (why := refusal(target)) is not None:
            log.warning("%s", why, extra=fields(event="retarget", step="refused", target=url,
                                                reason="not-https-pinned"))
            return None
        assert target.ca_pin is not None
        try:
            pem = await trust.pinned_ca(url, target.ca_pin, self.proxy,
                                        self.settings.timeout * 5, trust.MOVE_TARGET)
        except trust.CAUnreachable as exc:
            log.info("the target's CA cannot be fetched (%s)", exc,
                     extra=fields(event="retarget", step="unreachable", target=url))
            return None
        except trust.TrustError as exc:
            log.warning("%s", exc, extra=fields(event="retarget", step="refused",
                                                target=url, reason="ca-pin-mismatch"))
            return None
        log.info("the target's CA matches its pin", extra=fields(
            event="retarget", step="ca-verified", target=url, ca_pin=target.ca_pin))
        # Every replica of the target is reached over TLS verified against this CA only.
        place = Place(target.urls, pem)
        known = await self._knows(place, identity, "target")
        return place if known else None

    async def _knows(self, place: Place, identity: Identity, what: str,
                     assignment: bool = False) -> Mapping[str, Any] | bool:
        """Whether the coordinator at place knows this machine's credential (a heartbeat it
        accepts); with assignment, its assignment for the machine instead of True."""
        probe = CoordinatorClient(place.endpoints(self.proxy), timeout=self.settings.timeout * 5,
                                  context=place.context(), rand=self.rand)
        url = place.urls[0]
        try:
            await probe.heartbeat(identity.machine_id, identity.credential)
            polled = await probe.assignment(identity.machine_id, identity.credential, Held(),
                                            0) if assignment else None
        except Rejected as exc:
            log.info("the %s does not know this machine's credential (%s)", what, exc,
                     extra=fields(event="retarget", step="unknown", target=url))
            return False
        except Unreachable as exc:
            log.info("the %s does not answer (%s)", what, exc,
                     extra=fields(event="retarget", step="unreachable", target=url))
            return False
        log.info("the %s knows this machine's credential", what, extra=fields(
            event="retarget", step="credential-known", target=url))
        if not assignment:
            return True
        return polled[0] if polled is not None else False

    def _switch(self, place: Place, step: str) -> None:
        """Save, then talk to place from the next call on."""
        previous = self.home.previous if self.home else None
        self.home = moved(self.here, previous, place, time.time())
        save_home(self.settings.state_dir, self.home)
        self.here = place
        self.client.move_to(place.endpoints(self.proxy), place.context())
        self.moved.set()
        log.info("now following the coordinator at %s", place.urls[0], extra=fields(
            event="retarget", step=step, coordinator=place.urls[0],
            fallback=self.home.previous.urls[0] if self.home.previous else None))

    async def watch(self, identity: Identity, every: float = 5.0) -> None:
        """Go back to the coordinator moved from when the one moved to has been silent for
        fallback_seconds and the former no longer names it (the move was rolled back)."""
        while True:
            await asyncio.sleep(every)
            home = self.home
            if not fallback_due(home, self.client.reconnect.silent_for(),
                                self.settings.fallback_seconds):
                continue
            assert home is not None and home.previous is not None
            log.info("%s has not answered for %.0fs: asking %s whether the move stands",
                     home.current.urls[0], self.client.reconnect.silent_for(),
                     home.previous.urls[0], extra=fields(event="retarget", step="fallback-check",
                                                         fallback=home.previous.urls[0]))
            answer = await self._knows(home.previous, identity, "coordinator moved from",
                                       assignment=True)
            if not isinstance(answer, Mapping):
                continue
            if goes_back(target_of(answer), home):
                self.stop()
                self._switch(home.previous, "back")
            else:
                log.info("%s still names %s: waiting for it", home.previous.urls[0],
                         home.current.urls[0], extra=fields(event="retarget", step="wait"))
                self.client.reconnect.answered()  # ask again only after another silence

