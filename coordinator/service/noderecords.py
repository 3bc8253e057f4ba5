"""What node tasks record into: the NodeStatus of machines, the changes a look or a list found
written in one transaction under the write lock, as domain/nodewatching.node_recorded decides
each (only while the machine is admitted: one being deleted keeps what it had). Each write
asks for a reconcile pass, whose planner moves a machine to Ready once its Node is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.domain.model import ClusterSpec, Machine
from coordinator.domain.nodes.nodes import NodeFound
from coordinator.domain.nodes.nodewatching import nodes_recorded
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes


@dataclass(frozen=True)
class NodeRecords:
    writes: Writes
    queries: Queries
    clock: Callable[[], float]

    async def current(self, machine_id: str) -> tuple[ClusterSpec, Machine] | None:
        machine = await self.writes.store.get_machine(machine_id)
        spec = None if machine is None else await self.queries.spec_of(machine)
        return None if machine is None or spec is None else (spec, machine)

    async def machines(self, machine_ids: Sequence[str]) -> list[Machine]:
        """The machines of these ids, read at once (a sweep's idle machines found down)."""
        return await self.writes.store.get_machines(machine_ids)

    async def record(self, found: Sequence[NodeFound]) -> set[str]:
        """Write what was found, each on its machine as stored, in one transaction
        (nodewatching.nodes_recorded decides it), then ask for a pass; the ids of the
        machines written."""
        if not found:
            return set()
        async with self.writes.lock:
            stored = {m.id: m for m in await self.writes.store.get_machines(
                [f.machine.id for f in found])}
            change = nodes_recorded(stored, found, self.clock())
            if not change.writes:
                return set()
            await self.writes.apply(change)
        self.writes.wake(change)
        return {m.id for m in change.machines}
