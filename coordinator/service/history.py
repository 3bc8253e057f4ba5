"""The event history's retention: every event is kept for a while, none for ever. Agents and
reconcile passes append events without end; pruning the oldest on a schedule bounds the store
and every read of it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.store.base import Store, StoreError
from nodeagent.wire.logfmt import fields

log = logging.getLogger("coordinator")

PRUNE_CHUNK = 10_000  # events deleted in one transaction: writers wait at most that long


@dataclass(frozen=True)
class Retention:
    """How much history is kept: events younger than max_age_seconds, and of those at most
    the newest max_events (`coordinator serve --event-retention --event-max`)."""

    max_age_seconds: float = 30 * 86400.0
    max_events: int = 1_000_000
    interval_seconds: float = 3600.0  # between prunes


DEFAULT_RETENTION = Retention()


class EventRetention:
    def __init__(self, store: Store, clock: Callable[[], float], retention: Retention,
                 pruned: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.clock = clock
        self.retention = retention
        self.on_pruned = pruned  # told after each prune, whatever went: what is kept of the
        # history (the status's) drops what this or another replica pruned

    async def prune(self) -> int:
        """Delete what the retention no longer keeps, a chunk at a time; how many went."""
        before = self.clock() - self.retention.max_age_seconds
        pruned = 0
        while deleted := await self.store.prune_events(before, self.retention.max_events,
                                                       PRUNE_CHUNK):
            pruned += deleted
        if pruned:
            log.info("pruned %d events beyond the retention (%g days, %d events)", pruned,
                     self.retention.max_age_seconds / 86400, self.retention.max_events)
        self.on_pruned()
        return pruned

    async def run(self) -> None:
        """Prune now and then every interval, on every replica (a prune is idempotent)."""
        while True:
            try:
                await self.prune()
            except StoreError as exc:  # the store is down for now: the next prune catches up
                log.warning("event retention: %s", exc, extra=fields(event="error"))
            await asyncio.sleep(self.retention.interval_seconds)
