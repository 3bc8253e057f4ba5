"""What a cluster's status is computed from, kept between calls (domain/views/statusmemo.py says
why): its machines, kept current by the writes seam (this replica's writes, and the ids other
replicas relay), and their state history, read on from the last event seen. A call reads only
the machines written since the last one and the events recorded since.

What the writes seam does not see drops what is kept: a prune of the history (each replica
prunes in turn, so events another replica pruned stop counting here by this replica's next
prune), a pivot's copy of the target's views, a cluster re-created under its old name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field

from coordinator.domain.model import Machine
from coordinator.domain.records import StoredCluster
from coordinator.domain.rollout.steps import History
from coordinator.domain.views.status import HISTORY_KINDS
from coordinator.domain.views.statusmemo import StatusMemo
from coordinator.store.base import Store

EVENT_PAGE = 10000
# Past this many written ids unread (no status asked for a long while), reading every kept
# machine again is cheaper than keeping the ids.
MAX_WRITTEN = 50_000


def status_order(machines: Collection[Machine]) -> list[Machine]:
    """The order the status lists machines in: by hostname, then id (as the store lists a
    cluster's machines, but independent of a database's collation)."""
    return sorted(machines, key=lambda m: (m.hostname, m.id))


@dataclass
class Kept:
    """One cluster's inputs to its status, current as of the last call."""

    created: float  # the cluster's creation: a cluster re-created under its name starts anew
    by_id: dict[str, Machine]
    history: History
    last_event: int  # the newest event read into history
    memo: StatusMemo = field(default_factory=StatusMemo)
    _ordered: list[Machine] | None = None
    _places: dict[str, int] = field(default_factory=dict)  # id -> index in _ordered
    _managers: dict[str, Machine] | None = None  # by id: where the cluster's kubeconfig is

    @property
    def managers(self) -> list[Machine]:
        """The managers alone: what the kubeconfig in use is chosen from, without a look at
        10,000 workers every status."""
        if self._managers is None:
            self._managers = {i: m for i, m in self.by_id.items() if m.role == "manager"}
        return list(self._managers.values())

    @property
    def machines(self) -> list[Machine]:
        if self._ordered is None:
            self._ordered = status_order(self.by_id.values())
            self._places = {m.id: n for n, m in enumerate(self._ordered)}
        return self._ordered

    def put(self, machine: Machine) -> None:
        before = self.by_id.get(machine.id)
        self.by_id[machine.id] = machine
        if self._managers is not None:
            self._managers.pop(machine.id, None)
            if machine.role == "manager":
                self._managers[machine.id] = machine
        if self._ordered is None:
            return
        if before is None or before.hostname != machine.hostname:
            self._ordered = None  # sorted again when next asked for
        else:  # the same place in the order
            self._ordered[self._places[machine.id]] = machine

    def drop(self, machine_id: str) -> None:
        if self.by_id.pop(machine_id, None) is not None:
            self._ordered = None
            if self._managers is not None:
                self._managers.pop(machine_id, None)


class StatusCache:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._clusters: dict[str, Kept] = {}
        self._written: set[str] = set()
        self._loading = 0  # clusters being read whole: writes meanwhile are read again after
        self._lock = asyncio.Lock()

    def written(self, machine_ids: Collection[str] | None) -> None:
        """Machines were written, here or by another replica (None: any may have been)."""
        if machine_ids is None or len(self._written) > MAX_WRITTEN:
            self.forget()
        elif self._clusters or self._loading:
            self._written.update(machine_ids)

    def forget(self) -> None:
        """Drop everything kept: the next status reads its cluster whole."""
        self._clusters.clear()
        self._written.clear()

    async def current(self, stored: StoredCluster) -> Kept:
        """The cluster's machines and history as the store holds them now."""
        async with self._lock:
            await self._read_written()
            name = stored.spec.name
            kept = self._clusters.get(name)
            if kept is None or kept.created != stored.created_at:
                kept = self._clusters[name] = await self._load(stored)
            await self._read_events(name, kept)
            return kept

    async def _read_written(self) -> None:
        ids, self._written = self._written, set()
        if not ids or not self._clusters:
            return
        found = {m.id: m for m in await self.store.get_machines(ids)}
        for name, kept in self._clusters.items():
            for machine_id in ids:
                m = found.get(machine_id)
                if m is not None and m.cluster == name:
                    kept.put(m)
                else:
                    kept.drop(machine_id)

    async def _load(self, stored: StoredCluster) -> Kept:
        self._loading += 1
        try:
            machines = await self.store.list_machines(stored.spec.name)
        finally:
            self._loading -= 1
        return Kept(stored.created_at, {m.id: m for m in machines}, History(), 0)

    async def _read_events(self, name: str, kept: Kept) -> None:
        while page := await self.store.list_events(cluster=name, since_id=kept.last_event,
                                                   limit=EVENT_PAGE, kinds=HISTORY_KINDS):
            kept.history.extend(page)
            kept.last_event = page[-1].id
