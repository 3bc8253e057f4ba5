"""Which replica reconciles: every replica relays wake-ups, and the one that holds the store's
leadership runs the reconcile loop and the drains, from its election until its term is lost,
when both stop at once (and the store fences any write still on its way)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from coordinator.service.drainer import Drainer
from coordinator.service.nodewatch import NodeWatch
from coordinator.service.notifier import Notifier
from coordinator.service.reconciler import Reconciler
from coordinator.store.base import Store, Term, leader_epoch
from nodeagent.wire.logfmt import fields

log = logging.getLogger("coordinator")
# A deposed leader waits this long before it campaigns again: the replicas that saw it go
# (they try every second) take over, rather than it winning back a lock it just lost.
STANDBY_SECONDS = 3.0


class Leadership:
    def __init__(self, store: Store, notifier: Notifier, reconciler: Reconciler,
                 drainer: Drainer, nodes: NodeWatch,
                 idle: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self.notifier = notifier
        self.reconciler = reconciler
        self.drainer = drainer
        self.nodes = nodes
        self.idle = idle  # True: no passes (a coordinator that moved is a read-only copy)
        self._term: Term | None = None  # while this replica leads the reconcile loop

    async def run(self, tick: float = 1.0) -> None:
        """Relay wake-ups to and from the other replicas (if any), and reconcile whenever this
        replica leads."""
        await self.share()
        while True:
            term = await self.store.campaign()
            if term.epoch is not None:
                log.info("leading the reconcile loop (leader epoch %d)", term.epoch)
            await self._lead(term, tick)
            log.warning("lost leadership (leader epoch %s): standing by", term.epoch)
            await asyncio.sleep(STANDBY_SECONDS)

    async def _lead(self, term: Term, tick: float) -> None:
        """Reconcile until the term is lost; then stop reconciling, draining and watching
        nodes."""
        self._term = term
        self.reconciler.took_over()
        epoch = leader_epoch.set(term.epoch)
        try:
            work = asyncio.create_task(self._reconcile_loop(tick))  # inherits the epoch
        finally:
            leader_epoch.reset(epoch)
        lost = asyncio.create_task(term.lost.wait())
        try:
            await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._term = None
            for task in (work, lost):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.drainer.close()
            await self.nodes.close()

    async def share(self) -> None:
        """With replicas sharing the store: their wakes, changes and kicks reach this one's
        agents, watchers and reconcile loop, and this one's reach theirs."""
        if await self.store.listen(self.notifier.deliver):
            self.notifier.relay(self.store.publish)

    async def after_reports(self) -> None:
        """Right after a batch of reports, still under the write lock: when one asked for a
        pass (an item succeeded) and this replica leads, plan now rather than let the loop
        queue for the lock behind the next batch: the next worker of a rollout is admitted as
        soon as the one before it is recorded done."""
        term = self._term
        if term is None or term.lost.is_set() or not self.notifier.kicked.is_set() \
                or self.idle():
            return
        self.notifier.kicked.clear()
        epoch = leader_epoch.set(term.epoch)  # the store fences it as it fences the loop
        try:
            await self.reconciler.reconcile_locked()
        except Exception:  # the reports are recorded; the loop tries again
            log.exception("reconcile pass failed", extra=fields(event="error"))
            self.notifier.kick()
        finally:
            leader_epoch.reset(epoch)

    async def _reconcile_loop(self, tick: float) -> None:
        """A pass on every kick, and at least every tick seconds."""
        while True:
            try:
                await asyncio.wait_for(self.notifier.kicked.wait(), tick)
            except TimeoutError:
                pass
            else:
                if not self.notifier.kicked.is_set():
                    continue  # a pass after a batch of reports took the kick meanwhile
            self.notifier.kicked.clear()
            if self.idle():
                continue
            try:
                await self.reconciler.reconcile_once()
            except Exception:  # a bad pass must not stop the loop; the next one retries
                log.exception("reconcile pass failed", extra=fields(event="error"))
                await asyncio.sleep(tick)
