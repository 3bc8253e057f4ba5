"""The one seam every machine write goes through: the store, the set of machines the next
reconcile pass plans on, authentication's cache, the relay that tells other replicas, and the
coordinator's log of what happened (eventlog.py).

A write marks its machines changed, as written (the pass plans on that copy, with the
heartbeats written since) or by id only (the pass reads them again). Replicas relay the ids
of the machines they wrote; what another replica wrote is read again here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.model import Machine
from coordinator.domain.records import Event
from coordinator.service.credentials import CredentialCache
from coordinator.service.eventlog import log_events
from coordinator.service.notifier import Notifier
from coordinator.store.base import Store

WrittenElsewhere = Callable[[Collection[str] | None], None]


class Writes:
    def __init__(self, store: Store, notifier: Notifier, credentials: CredentialCache) -> None:
        self.store = store
        self.lock = store.mutex()  # spans every replica when the store is shared
        self.notifier = notifier
        self.credentials = credentials
        # Machines written since the last pass: as this replica committed them (kept current
        # with the heartbeats flushed since), or None where the pass must read them again.
        self._changed: dict[str, Machine | None] = {}
        self._listeners: list[WrittenElsewhere] = []
        self._watchers: list[WrittenElsewhere] = []
        notifier.on_written = self._written_elsewhere

    async def apply(self, change: Change, *, planned: bool = False) -> None:
        """Write an operation's or a loop's whole change in one transaction (Store.apply); the
        next reconcile pass plans on its machines, unless the change is a pass's own
        (`planned`: the pass keeps them itself), whose writes authentication and the other
        replicas learn of all the same; a change that writes nothing costs no round trip. Call
        `wake` once the write lock is released."""
        if not change.writes:
            return
        await self.store.apply(change)
        log_events(change.events)
        if planned:
            self._written_here(list(change.removed), change.machines)
        else:
            self.mark(change.removed, change.machines)

    def wake(self, change: Change, news: Mapping[str, object] | None = None) -> None:
        """Answer the long-polls of the agents the change names (handing them news[id], what
        their assignments are made of, where the caller read it already), else tell the
        history's watchers of its events; and ask for the reconcile pass it wants."""
        if change.wake:
            self.notifier.wake(change.wake, news)  # the watchers too
        elif change.events:
            self.notifier.changed()
        if change.kick:
            self.notifier.kick()

    async def record(self, events: Sequence[Event]) -> None:
        """Write events that change no machine and that no operation decided (the audit, the
        refusals counted): nothing to mark for the pass, tell authentication or relay."""
        await self.store.commit([], events)
        log_events(events)

    def mark(self, machine_ids: Iterable[str], machines: Iterable[Machine] = ()) -> None:
        """Machines just written (or heard from again): the next pass plans on them as written
        (machines) or reads them again (machine_ids)."""
        machine_ids, machines = list(machine_ids), list(machines)
        self._changed.update(dict.fromkeys(machine_ids))
        self._changed.update((m.id, m) for m in machines)
        self._written_here(machine_ids, machines)

    def take_changed(self) -> dict[str, Machine | None]:
        """What was written since the last pass, which starts the next set."""
        changed, self._changed = self._changed, {}
        return changed

    def heard(self, seen: Mapping[str, float]) -> None:
        """Heartbeats were written: the copies the next pass plans on stay what the store holds."""
        for machine_id, when in seen.items():
            written = self._changed.get(machine_id)
            if written is not None and written.last_seen < when:
                self._changed[machine_id] = replace(written, last_seen=when)

    def on_written_elsewhere(self, listener: WrittenElsewhere) -> None:
        """Call listener with the ids another replica wrote (None: some, unknown which)."""
        self._listeners.append(listener)

    def on_written(self, watcher: WrittenElsewhere) -> None:
        """Call watcher with the ids of the machines written, here or by another replica
        (None: any may have been)."""
        self._watchers.append(watcher)

    def _written_here(self, machine_ids: Sequence[str], machines: Sequence[Machine]) -> None:
        self.credentials.forget(machine_ids, machines)
        ids = [*machine_ids, *(m.id for m in machines)]
        self.notifier.written(ids)
        for watcher in self._watchers:
            watcher(ids)

    def _written_elsewhere(self, machine_ids: Collection[str] | None) -> None:
        if machine_ids is None:
            self.credentials.forget_all()
        else:
            self._changed.update(dict.fromkeys(machine_ids))
            self.credentials.forget(machine_ids)
        for listener in [*self._listeners, *self._watchers]:
            listener(machine_ids)
