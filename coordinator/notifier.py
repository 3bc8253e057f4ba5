"""Wakes long-polling agents the moment their assignment changes (no polling interval),
watchers of the event history (dashboard streams, `--follow`) whenever anything is recorded,
and the reconcile loop when there is something to plan.

Coordinator replicas sharing a store relay all three to each other: once relay() is given a
way to publish, every wake, change and kick is also sent (batched, in the background) to the
other replicas, whose deliver() applies it locally. Locally nothing waits on the relay.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable

from coordinator.store.base import MAX_MESSAGE

log = logging.getLogger("coordinator.notifier")


class Notifier:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self.kicked = asyncio.Event()  # set by kick(); the reconcile loop clears it
        self._publish: Callable[[str], Awaitable[None]] | None = None
        self._replica = uuid.uuid4().hex[:12]  # to recognize, and ignore, our own messages
        self._outbox: set[str] = set()
        self._out_changed = self._out_kick = False
        self._sending: asyncio.Task[None] | None = None

    def subscribe(self, machine_id: str) -> asyncio.Event:
        """The event the next wake of machine_id sets. Subscribe before reading state,
        so a change between the read and the wait is never missed."""
        return self._events.setdefault(machine_id, asyncio.Event())

    def wake(self, machine_ids: Iterable[str]) -> None:
        machine_ids = list(machine_ids)
        self._wake(machine_ids)
        self._relay(machine_ids, changed=True)

    def changes(self) -> asyncio.Event:
        """The event the next change of any kind sets. Subscribe before reading, as above."""
        return self._changed

    def changed(self) -> None:
        """Something was recorded (an event, a report): wake every history watcher, but no agent."""
        self._notify_changed()
        self._relay((), changed=True)

    def kick(self) -> None:
        """Ask for a reconcile pass (on whichever replica leads)."""
        self.kicked.set()
        self._relay((), kick=True)

    def wake_all(self) -> None:
        """On shutdown: answer every parked long-poll now rather than when it times out."""
        self._wake(list(self._events))

    # -- between replicas ---------------------------------------------------------------
    def relay(self, publish: Callable[[str], Awaitable[None]]) -> None:
        """From now on, send every wake, change and kick to the other replicas too."""
        self._publish = publish

    def deliver(self, message: str) -> None:
        """A message another replica published; "" (messages may have been lost): wake all."""
        if not message:
            self.wake_all()
            self._notify_changed()
            self.kicked.set()
            return
        try:
            body = json.loads(message)
        except ValueError:
            log.warning("ignoring a malformed message from another replica: %.80r", message)
            return
        if body.get("from") == self._replica:
            return
        self._wake(body.get("wake", ()))
        if body.get("changed"):
            self._notify_changed()
        if body.get("kick"):
            self.kicked.set()

    def _wake(self, machine_ids: Iterable[str]) -> None:
        for machine_id in machine_ids:
            event = self._events.pop(machine_id, None)
            if event is not None:
                event.set()
        self._notify_changed()

    def _notify_changed(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _relay(self, machine_ids: Iterable[str], changed: bool = False, kick: bool = False) -> None:
        if self._publish is None:
            return
        self._outbox.update(machine_ids)
        self._out_changed |= changed
        self._out_kick |= kick
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send(self._publish))

    async def _send(self, publish: Callable[[str], Awaitable[None]]) -> None:
        """Send what accumulated, again while more comes in; a lost message only delays the
        other replicas' agents until their long-poll times out."""
        while self._outbox or self._out_changed or self._out_kick:
            messages = encode(self._replica, sorted(self._outbox), self._out_changed,
                              self._out_kick)
            self._outbox, self._out_changed, self._out_kick = set(), False, False
            for message in messages:
                try:
                    await publish(message)
                except Exception as exc:
                    log.warning("cannot tell the other replicas: %s", exc)


def encode(replica: str, machine_ids: list[str], changed: bool, kick: bool) -> list[str]:
    """Messages of at most MAX_MESSAGE bytes that together say all of it."""
    head = {"from": replica, "changed": changed, "kick": kick}

    def dump(batch: list[str]) -> str:
        return json.dumps({**head, "wake": batch}, separators=(",", ":"))

    messages: list[str] = []
    batch: list[str] = []
    size = len(dump([]))
    for machine_id in machine_ids:
        grows = len(json.dumps(machine_id).encode()) + 1  # and a comma
        if batch and size + grows > MAX_MESSAGE:
            messages.append(dump(batch))
            batch, size = [], len(dump([]))
        batch.append(machine_id)
        size += grows
    messages.append(dump(batch))
    return messages
