"""The drainer's ledger: how a drain task records its progress on the machine. A write counts
only while the machine is in Upgrade (or Deleting) with the drain attempt the task ran, so an
operator's retry, skip or force (a new attempt), or a deletion, makes an older task's writes
no-ops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from coordinator.domain.events import event
from coordinator.domain.model import DrainStatus, Machine, MachineState, items_may_run
from coordinator.service.notifier import Notifier
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes

# The states whose machines' nodes drain tasks work on.
DRAINED_STATES = frozenset({MachineState.UPGRADE, MachineState.DELETING})


def same_attempt(now: DrainStatus | None, expected: DrainStatus | None) -> bool:
    """Whether the stored drain is the attempt the caller ran (None: no drain yet)."""
    if now is None or expected is None:
        return now is expected
    return (now.attempt, now.started_at) == (expected.attempt, expected.started_at)


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
        agent is woken when its upgrade items may now run."""
        async with self.writes.lock:
            machine = await self.writes.store.get_machine(machine_id)
            if machine is None or machine.state not in DRAINED_STATES \
                    or not same_attempt(machine.drain, expected):
                return False
            spec = (await self.queries.cluster(machine.cluster)).spec
            updated = replace(machine, drain=status)
            if items_may_run(spec, updated) != items_may_run(spec, machine):
                updated = replace(updated, generation=machine.generation + 1)
            events = [] if message is None else [event(
                self.clock(), machine.cluster, "drain", message, updated,
                {"stage": status.stage.value, "blocking_pods": list(status.blocking_pods),
                 "blocking_budgets": list(status.blocking_budgets), "evicted": status.evicted})]
            await self.writes.commit([updated], events)
            self.notifier.wake([machine.id])
        self.kick()
        return True
