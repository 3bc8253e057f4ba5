"""Refused admin attempts (401, 403), counted per source address and status and written as
one `audit` event each per window: every refusal leaves a trace, and a flood of bad tokens
writes a handful of events saying how many, never one per request. State in memory, no I/O;
the caller passes the clock and writes the events."""

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


class RefusalTally:
    """The refusals since the last `drain`, bounded by MAX_SOURCES whatever the flood."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], _Count] = {}

    def note(self, source: str, status: int, reason: str, method: str, path: str,
             now: float) -> None:
        key = (source, status)
        if key not in self._counts and len(self._counts) >= MAX_SOURCES:
            key = (OTHERS, status)
        found = self._counts.get(key)
        if found is None:
            self._counts[key] = _Count(1, now, now, method, path[:MAX_PATH], reason)
            return
        found.count += 1
        found.last, found.method, found.path, found.reason = now, method, path[:MAX_PATH], reason

    def drain(self, now: float) -> list[Event]:
        """One audit event per source and status counted since the last drain; then none."""
        counts, self._counts = self._counts, {}
        return [event(now, "", "audit", _message(source, status, c), data={
            "source": source, "status": status, "refused": c.count, "first": c.first,
            "last": c.last, "method": c.method, "path": c.path, "reason": c.reason})
            for (source, status), c in counts.items()]


def _message(source: str, status: int, count: _Count) -> str:
    times = "once" if count.count == 1 else f"{count.count} times"
    return (f"{source}: admin request refused {times} ({status}: {count.reason}), last "
            f"{count.method} {count.path}")
