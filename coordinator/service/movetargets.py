"""The coordinator every agent is told to move to (a pivot's announcement, issue 22): one for
the whole coordinator, since a pivot moves all of its state at once (clusters, machines,
tokens, PKI) and an agent of one cluster left behind would be half a move.

Set or cleared, it reaches every agent through its own assignment: each machine's generation
is bumped and its long-poll woken, on every replica, as a cluster apply does. Only a target
that is https with its CA pinned is ever named (domain/pivot.py: `target_problems`): agents
send it their credential."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from coordinator.domain.pivot import target_problems
from coordinator.service.notifier import Notifier
from coordinator.service.writes import Writes
from nodeagent.wire.protocol import MoveTarget
from nodeagent.wire.validation import InvalidDocument

log = logging.getLogger("coordinator.service.movetargets")


class MoveTargets:
    def __init__(self, writes: Writes, notifier: Notifier, clock: Callable[[], float]) -> None:
        self.writes = writes
        self.store = writes.store
        self.notifier = notifier
        self.clock = clock

    async def current(self) -> MoveTarget | None:
        """Read at each assignment made (one indexed row): a target another replica set is
        what the assignments this one makes carry as soon as it is written."""
        doc = await self.store.move_target()
        return None if doc is None else MoveTarget.model_validate_json(doc)

    async def set(self, urls: list[str], ca_pin: str | None) -> MoveTarget:
        """Tell every agent to move to urls (checked against ca_pin; InvalidDocument unless
        they are https and pinned). Setting the target it already names again keeps its
        `since` and announces it again: the target and the generations it bumps are two
        writes, and a crash between them must not leave agents untold when the pivot is run
        again (an agent told twice re-reads the same work)."""
        problems = target_problems([("url", url) for url in urls], "caPin", ca_pin)
        if problems:
            raise InvalidDocument(problems)
        before = await self.current()
        same = before is not None and before.urls == urls and before.ca_pin == ca_pin
        target = before if same and before is not None else \
            MoveTarget(urls=urls, ca_pin=ca_pin, since=self.clock())
        await self._announce(target)
        log.info("move target %s: agents move to %s (CA %s)", "announced again" if same
                 else "set", " ".join(urls), ca_pin)
        return target

    async def clear(self) -> MoveTarget | None:
        """Tell every agent to stay (a pivot rolled back); the target cleared, if any. Announced
        even when none is left, for the reason `set` announces a repeat: a crash after the
        target was cleared and before the generations were bumped. An agent already moved comes
        back once the target stops answering (docs/agent.md)."""
        before = await self.current()
        await self._announce(None)
        if before is not None:
            log.info("move target cleared: agents stay here (it was %s)", " ".join(before.urls))
        return before

    async def _announce(self, target: MoveTarget | None) -> None:
        async with self.writes.lock:
            await self.store.set_move_target(None if target is None
                                             else target.model_dump_json())
            machines = [replace(m, generation=m.generation + 1)
                        for m in await self.store.list_machines()]
            await self.writes.commit(machines, [])
        self.notifier.wake(m.id for m in machines)
