"""The audit trail of refused attempts (admin requests, registrations, connections): refusals are counted
in memory as they come (`domain/machines/refusals.py`) and written every AUDIT_WINDOW_SECONDS, one event
per source address, status and kind, so a flood of bad tokens costs the store a few rows a
minute. The log shows the first of each at once, and the count with the event."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coordinator.domain.machines.refusals import ADMIN_REQUEST, MAX_PATH, RefusalTally
from coordinator.service.writes import Writes
from nodeagent.wire.logfmt import fields

log = logging.getLogger("coordinator")
AUDIT_WINDOW_SECONDS = 60.0


class RefusalAudit:
    def __init__(self, writes: Writes, clock: Callable[[], float]) -> None:
        self.writes = writes
        self.clock = clock
        self.tally = RefusalTally()

    def refused(self, source: str, status: int, reason: str, method: str, path: str,
                what: str = ADMIN_REQUEST) -> None:
        """A 401 or 403 answered to an admin request (or to /metrics), a registration refused,
        a request answered 408 (its body too slow), or a connection closed at once or for want
        of its handshake and headers in time (status 0): counted, not written; logged when it
        is the first of its kind this window."""
        note_refusal(self.tally, self.clock(), source, status, reason, method, path, what)

    async def flush(self) -> None:
        """Write what was counted since the last flush."""
        events = self.tally.drain(self.clock())
        if events:
            await self.writes.record(events)

    async def run(self, interval: float = AUDIT_WINDOW_SECONDS) -> None:
        """Flush every interval seconds, until cancelled (close() flushes the rest)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except Exception:  # the store is away for a while: these counts are lost, not the next
                log.exception("writing the audit of refused requests failed",
                              extra=fields(event="error"))


def note_refusal(tally: RefusalTally, now: float, source: str, status: int, reason: str,
                 method: str, path: str, what: str = ADMIN_REQUEST) -> None:
    """Count one refusal in tally; log it at once when it is the first of its source, status
    and kind this window (the rest are in the window's count)."""
    if tally.note(source, status, reason, method, path, now, what):
        log.info("%s refused (%d): %s", what, status, reason, extra=fields(
            event="refused", what=what, source=source, status=status, method=method,
            path=path[:MAX_PATH]))
