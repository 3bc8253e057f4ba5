"""What node tasks record into: the NodeStatus of machines, the changes a look or a list found
written in one transaction under the write lock, as domain/nodewatching.node_recorded decides
each (only while the machine is admitted: one being deleted keeps what it had). Each write
wakes the reconciler, whose planner moves a machine to Ready once its Node is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.domain.model import ClusterSpec, Machine
from coordinator.domain.nodes import NodeChange
from coordinator.domain.nodewatching import node_recorded
from coordinator.service.notifier import Notifier
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes


@dataclass(frozen=True)
class NodeRecords:
    writes: Writes
    queries: Queries
    notifier: Notifier
    clock: Callable[[], float]

    async def current(self, machine_id: str) -> tuple[ClusterSpec, Machine] | None:
        machine = await self.writes.store.get_machine(machine_id)
        spec = None if machine is None else await self.queries.spec_of(machine)
        return None if machine is None or spec is None else (spec, machine)

    async def machines(self, machine_ids: Sequence[str]) -> list[Machine]:
        """The machines of these ids, read at once (a sweep's idle machines found down)."""
        return await self.writes.store.get_machines(machine_ids)

    async def record(self, changes: Sequence[NodeChange]) -> set[str]:
        """Write the changes found, each on its machine as stored, in one commit; the ids of
        the machines written."""
        if not changes:
            return set()
        async with self.writes.lock:
            stored = {m.id: m for m in await self.writes.store.get_machines(
                [c.machine.id for c in changes])}
            now = self.clock()
            decided = [node_recorded(stored.get(c.machine.id), c, now) for c in changes]
            written = [d for d in decided if d is not None]
            if not written:
                return set()
            await self.writes.commit([m for m, _ in written], [e for _, es in written for e in es])
        self.notifier.kick()
        return {m.id for m, _ in written}
