"""What drain tasks record into: a machine's DrainStatus, through one read and one
transaction under the write lock (Writes.apply), as domain/draining.recorded decides it. A
write counts only while the machine is in Upgrade (or Deleting) with the drain attempt the
task ran, so an operator's retry, skip or force (a new attempt), or a deletion, makes an
older task's writes no-ops."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.domain.model import DrainStatus, Machine
from coordinator.domain.nodes.draining import recorded
from coordinator.service.notifier import Notifier
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes


class DrainRecords:
    def __init__(self, writes: Writes, queries: Queries, notifier: Notifier,
                 clock: Callable[[], float]) -> None:
        self.writes = writes
        self.queries = queries
        self.notifier = notifier
        self.clock = clock

    async def machine(self, machine_id: str) -> Machine | None:
        return await self.writes.store.get_machine(machine_id)

    def kick(self) -> None:
        self.notifier.kick()

    async def set_drain(self, machine_id: str, expected: DrainStatus | None, status: DrainStatus,
                        message: str | None) -> bool:
        """Record status if the drain is still `expected`; an event only for a message. The
        agent is woken: its upgrade items may now run, or its drain's note changed."""
        async with self.writes.lock:
            machine = await self.writes.store.get_machine(machine_id)
            if machine is None:
                return False
            spec = (await self.queries.cluster(machine.cluster)).spec
            change = recorded(spec, machine, expected, status, message, self.clock())
            if not change.writes:
                return False
            await self.writes.apply(change)
        self.writes.wake(change)
        return True
