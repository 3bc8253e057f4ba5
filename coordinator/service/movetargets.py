"""The coordinator every agent is told to move to (a pivot's announcement): one for the whole
coordinator, since a pivot moves all of its state at once (clusters, machines, tokens, PKI)
and an agent of one cluster left behind would be half a move.

Set or cleared, it reaches every agent through its own assignment: the target and every
machine's new generation are one change (domain/transfer/movetarget.py), written in one transaction,
then every long-poll is woken, on every replica, as a cluster apply does. Only a target that
is https with its CA pinned is ever named (domain/transfer/pivot.py: `target_problems`): agents send it
their credential."""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.domain.transfer.movetarget import announced, withdrawn
from coordinator.service.writes import Writes
from nodeagent.wire.protocol import MoveTarget

log = logging.getLogger("coordinator.service.movetargets")


class MoveTargets:
    def __init__(self, writes: Writes, clock: Callable[[], float]) -> None:
        self.writes = writes
        self.store = writes.store
        self.clock = clock

    async def current(self) -> MoveTarget | None:
        """Read at each assignment made (one indexed row): a target another replica set is
        what the assignments this one makes carry as soon as it is written."""
        doc = await self.store.move_target()
        return None if doc is None else MoveTarget.model_validate_json(doc)

    async def set(self, urls: list[str], ca_pin: str | None) -> MoveTarget:
        """Tell every agent to move to urls (checked against ca_pin; InvalidDocument unless
        they are https and pinned). Setting the target it already names again keeps its
        `since` and announces it again."""
        async with self.writes.lock:
            before = await self.current()
            target, change = announced(before, urls, ca_pin, await self.store.list_machines(),
                                       self.clock())
            await self.writes.apply(change)
        self.writes.wake(change)
        log.info("move target %s: agents move to %s (CA %s)", "announced again"
                 if target is before else "set", " ".join(urls), ca_pin)
        return target

    async def clear(self) -> MoveTarget | None:
        """Tell every agent to stay (a pivot rolled back); the target cleared, if any."""
        async with self.writes.lock:
            before = await self.current()
            change = withdrawn(await self.store.list_machines())
            await self.writes.apply(change)
        self.writes.wake(change)
        if before is not None:
            log.info("move target cleared: agents stay here (it was %s)", " ".join(before.urls))
        return before
