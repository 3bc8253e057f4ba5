"""Wakes long-polling agents the moment their assignment changes (no polling interval)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Notifier:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def subscribe(self, machine_id: str) -> asyncio.Event:
        """The event the next wake of machine_id sets. Subscribe before reading state,
        so a change between the read and the wait is never missed."""
        return self._events.setdefault(machine_id, asyncio.Event())

    def wake(self, machine_ids: Iterable[str]) -> None:
        for machine_id in machine_ids:
            event = self._events.pop(machine_id, None)
            if event is not None:
                event.set()

    def wake_all(self) -> None:
        """On shutdown: answer every parked long-poll now rather than when it times out."""
        self.wake(list(self._events))
