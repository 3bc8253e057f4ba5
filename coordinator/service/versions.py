"""Which assignment each machine's agent would be answered with (its Version: the store's
epoch and the machine's generation), kept between long-polls: every poll starts by comparing
it with the tag the agent holds, and at 20,000 agents that one read per poll was a tenth of
the coordinator's CPU (docs/benchmarks.md).

A machine's generation grows only when it is written, and every write of a machine passes the
writes seam (service/writes.py), here or (relayed) on another replica: the seam's watchers
forget its entry at once, and a relay that lost messages forgets them all. The store's epoch
changes only when a snapshot is imported, into a store without machines (a pivot's target, a
restore), so no entry can hold an older one. What no replica relays (a tool writing the
database directly) is bounded by VERSION_CACHE_SECONDS: an agent waits at most that much
longer to see it."""

from __future__ import annotations

from collections.abc import Callable, Collection

from coordinator.domain.assignments.etags import Version
from coordinator.store.base import Store

VERSION_CACHE_SECONDS = 60.0  # several heartbeat intervals: most polls read nothing


class VersionCache:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._versions: dict[str, tuple[float, Version]] = {}  # machine id -> (read at, version)
        self._forgotten = 0  # grows on every forget: a read that raced one is not kept

    async def version(self, machine_id: str) -> Version | None:
        """The machine's version (None: no such machine), read from the store only when not
        kept or kept for longer than VERSION_CACHE_SECONDS."""
        now = self.clock()
        kept = self._versions.get(machine_id)
        if kept is not None and now - kept[0] <= VERSION_CACHE_SECONDS:
            return kept[1]
        forgotten = self._forgotten
        version = await self.store.machine_version(machine_id)
        if version is not None and forgotten == self._forgotten:
            self._versions[machine_id] = (now, version)
        return version

    def forget(self, machine_ids: Collection[str] | None) -> None:
        """Machines were written (None: any may have been): their next poll reads again."""
        self._forgotten += 1
        if machine_ids is None:
            self._versions.clear()
            return
        for machine_id in machine_ids:
            self._versions.pop(machine_id, None)
