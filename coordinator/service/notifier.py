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
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence

from coordinator.store.base import MAX_MESSAGE

log = logging.getLogger("coordinator.service.notifier")


class Wake(asyncio.Event):
    """A machine's next wake, and what the waker had at hand of the machine (its news), so
    that the woken need not read back what was just written."""

    news: object = None


class Notifier:
    def __init__(self) -> None:
        self._events: dict[str, Wake] = {}
        self._changed = asyncio.Event()
        self.kicked = asyncio.Event()  # set by kick(); the reconcile loop clears it
        self._publish: Callable[[str], Awaitable[None]] | None = None
        self._replica = uuid.uuid4().hex[:12]  # to recognize, and ignore, our own messages
        self._outbox: set[str] = set()
        self._out_written: set[str] = set()
        self._out_changed = self._out_kick = False
        # Told the ids of machines another replica wrote (None: any may have been written,
        # messages were lost), so that what this replica keeps of them is dropped.
        self.on_written: Callable[[Collection[str] | None], None] | None = None
        self._sending: asyncio.Task[None] | None = None

    def subscribe(self, machine_id: str) -> Wake:
        """The event the next wake of machine_id sets. Subscribe before reading state,
        so a change between the read and the wait is never missed."""
        return self._events.setdefault(machine_id, Wake())

    def waiting(self, machine_id: str) -> bool:
        """Whether anyone waits for the next wake of machine_id."""
        return machine_id in self._events

    def wake(self, machine_ids: Iterable[str], news: Mapping[str, object] | None = None) -> None:
        """Wake whoever waits for these machines, handing them news[machine_id] if given
        (here only: other replicas' waiters read for themselves)."""
        machine_ids = list(machine_ids)
        self._wake(machine_ids, news)
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

    def written(self, machine_ids: Iterable[str]) -> None:
        """This replica wrote these machines: the other replicas' copies of them are stale."""
        self._relay((), written=machine_ids)

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
            if self.on_written is not None:
                self.on_written(None)
            return
        try:
            body = json.loads(message)
        except ValueError:
            log.warning("ignoring a malformed message from another replica: %.80r", message)
            return
        if body.get("from") == self._replica:
            return
        self._wake(body.get("wake", ()))
        if body.get("written") and self.on_written is not None:
            self.on_written(body["written"])
        if body.get("changed"):
            self._notify_changed()
        if body.get("kick"):
            self.kicked.set()

    def _wake(self, machine_ids: Iterable[str], news: Mapping[str, object] | None = None) -> None:
        for machine_id in machine_ids:
            event = self._events.pop(machine_id, None)
            if event is not None:
                if news is not None:
                    event.news = news.get(machine_id)
                event.set()
        self._notify_changed()

    def _notify_changed(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _relay(self, machine_ids: Iterable[str], changed: bool = False, kick: bool = False,
               written: Iterable[str] = ()) -> None:
        if self._publish is None:
            return
        self._outbox.update(machine_ids)
        self._out_written.update(written)
        self._out_changed |= changed
        self._out_kick |= kick
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send(self._publish))

    async def _send(self, publish: Callable[[str], Awaitable[None]]) -> None:
        """Send what accumulated, again while more comes in; a lost message only delays the
        other replicas' agents until their long-poll times out."""
        while self._outbox or self._out_written or self._out_changed or self._out_kick:
            messages = encode(self._replica, sorted(self._outbox), self._out_changed,
                              self._out_kick, sorted(self._out_written))
            self._outbox, self._out_written = set(), set()
            self._out_changed = self._out_kick = False
            for message in messages:
                try:
                    await publish(message)
                except Exception as exc:
                    log.warning("cannot tell the other replicas: %s", exc)


def encode(replica: str, machine_ids: list[str], changed: bool, kick: bool,
           written: Sequence[str] = ()) -> list[str]:
    """Messages of at most MAX_MESSAGE bytes that together say all of it: the machines to
    wake, and the machines written."""
    head = {"from": replica, "changed": changed, "kick": kick}

    def dump(batch: dict[str, list[str]]) -> str:
        return json.dumps({**head, **batch}, separators=(",", ":"))

    def empty() -> dict[str, list[str]]:
        return {"wake": [], "written": []}

    messages: list[str] = []
    batch = empty()
    size = len(dump(batch))
    for key, machine_id in [*(("wake", i) for i in machine_ids),
                            *(("written", i) for i in written)]:
        grows = len(json.dumps(machine_id).encode()) + 1  # and a comma
        if (batch["wake"] or batch["written"]) and size + grows > MAX_MESSAGE:
            messages.append(dump(batch))
            batch = empty()
            size = len(dump(batch))
        batch[key].append(machine_id)
        size += grows
    messages.append(dump(batch))
    return messages
