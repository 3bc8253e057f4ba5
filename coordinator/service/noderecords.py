"""The node watch's ledger: how a node task records what it found of a machine's Node. A
write counts only while the machine is admitted (in Deploy or deployed): one being deleted
keeps what it had. Each write wakes the reconciler, whose planner moves a machine to Ready
once its Node is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.events import event
from coordinator.domain.model import ADMITTED_STATES, ClusterSpec, Machine, NodeStatus
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

    async def set_node(self, machine_id: str, status: NodeStatus, message: str | None) -> bool:
        """Record status on the machine if it is still admitted; an event only for a message."""
        async with self.writes.lock:
            machine = await self.writes.store.get_machine(machine_id)
            if machine is None or machine.state not in ADMITTED_STATES:
                return False
            updated = replace(machine, node=status)
            events = [] if message is None else [event(
                self.clock(), machine.cluster, "node", message, updated,
                {"node": status.name, "ready": status.ready})]
            await self.writes.commit([updated], events)
        self.notifier.kick()
        return True
