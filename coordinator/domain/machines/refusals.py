"""Refused attempts, admin requests (401, 403), registrations (401, 403, 409), requests whose
body came too slowly (408) and connections the listener closed at once or for want of their
handshake and headers in time (status 0: no request was read), counted per source address,
status and what was refused, and written as one `audit` event each per window:
every refusal leaves a trace, and a flood of bad tokens writes a handful of events saying how
many, never one per request. State in memory, no I/O; the caller passes the clock and writes
the events."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.events import event
from coordinator.domain.records import Event

MAX_SOURCES = 256  # distinct (address, status) pairs a window keeps; the rest share one count
OTHERS = "other addresses"
MAX_PATH = 200  # a refused request's path is the client's text: kept short


@dataclass
class _Count:
    count: int
    first: float
    last: float
    method: str
    path: str
    reason: str
    what: str


ADMIN_REQUEST = "admin request"
REGISTRATION = "registration"
CONNECTION = "connection"  # closed before its first request: no status, method or path
REQUEST = "request"  # any route's: 408, its body not complete in time


class RefusalTally:
    """The refusals since the last `drain`, bounded by MAX_SOURCES whatever the flood."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int, str], _Count] = {}

    def note(self, source: str, status: int, reason: str, method: str, path: str, now: float,
             what: str = ADMIN_REQUEST) -> bool:
        """Count one refusal; True when it is the first of its source, status and kind in
        this window (the one a log shows at once: the rest are counted in its event)."""
        key = (source, status, what)
        if key not in self._counts and len(self._counts) >= MAX_SOURCES:
            key = (OTHERS, status, what)
        found = self._counts.get(key)
        if found is None:
            self._counts[key] = _Count(1, now, now, method, path[:MAX_PATH], reason, what)
            return True
        found.count += 1
        found.last, found.method, found.path, found.reason = now, method, path[:MAX_PATH], reason
        return False

    def drain(self, now: float) -> list[Event]:
        """One audit event per source, status and kind counted since the last drain; then
        none."""
        counts, self._counts = self._counts, {}
        return [event(now, "", "audit", _message(source, status, c), data={
            "source": source, "status": status, "refused": c.count, "first": c.first,
            "last": c.last, "method": c.method, "path": c.path, "reason": c.reason,
            "what": c.what})
            for (source, status, _), c in counts.items()]


def _message(source: str, status: int, count: _Count) -> str:
    times = "once" if count.count == 1 else f"{count.count} times"
    if count.what == CONNECTION:
        return f"{source}: connection refused {times} ({count.reason})"
    return (f"{source}: {count.what} refused {times} ({status}: {count.reason}), last "
            f"{count.method} {count.path}")
