"""Heartbeats, kept in memory and written in batches: a durable write per heartbeat would cap
the fleet at the disk's fsync rate. A reconcile pass counts the ones not written yet."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coordinator.domain.model import Machine
from coordinator.domain.records import CredentialOwner
from coordinator.service.writes import Writes
from coordinator.store.base import Store
from nodeagent.wire.logfmt import fields

log = logging.getLogger("coordinator")
HEARTBEAT_FLUSH_SECONDS = 1.0


class HeartbeatBuffer:
    def __init__(self, store: Store, writes: Writes, clock: Callable[[], float],
                 kick: Callable[[], None]) -> None:
        self.store = store
        self.writes = writes
        self.clock = clock
        self.kick = kick
        self._seen: dict[str, float] = {}  # heartbeats not written yet: machine id -> time
        self._flushing: list[dict[str, float]] = []  # heartbeats being written now

    def beat(self, machine: CredentialOwner) -> None:
        """A heartbeat of machine; one that was not responding makes the reconciler record
        that it answers again."""
        now = self.clock()
        self._seen[machine.machine_id] = max(now, self._seen.get(machine.machine_id, now))
        if not machine.responding:
            self.writes.mark([machine.machine_id])
            self.kick()

    def last_heard(self, machine: Machine) -> float:
        """When the machine was last heard from, counting heartbeats not written yet: a pass
        need not write them first (a durable write on every pass)."""
        return max(machine.last_seen, self._seen.get(machine.id, 0.0),
                   *(seen.get(machine.id, 0.0) for seen in self._flushing))

    async def flush(self) -> None:
        """Write the heartbeats received since the last flush, in one transaction."""
        seen, self._seen = self._seen, {}
        if not seen:
            return
        self._flushing.append(seen)
        try:
            await self.store.touch_machines(seen)
        except BaseException:
            for machine_id, when in seen.items():  # kept for the next flush
                self._seen[machine_id] = max(when, self._seen.get(machine_id, when))
            raise
        finally:
            self._flushing.remove(seen)
        self.writes.heard(seen)

    async def run(self, interval: float = HEARTBEAT_FLUSH_SECONDS) -> None:
        """Flush every interval seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except Exception:  # e.g. the database is locked for a while: the next flush retries
                log.exception("writing heartbeats failed", extra=fields(event="error"))
