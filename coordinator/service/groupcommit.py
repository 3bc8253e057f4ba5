"""Group commit: requests that arrive while the lock is held (by a batch being written, or
anyone else) go in one batch together, so that N concurrent writers cost one lock
acquisition and one durable commit instead of N (a batch of 50 workers finishing
sends ~100 item reports at once, while the reconcile pass wants the same lock).

Each request keeps its own answer: the writer fails the ones it refuses, and a batch whose
write fails as a whole is written again one request at a time, so that one bad request fails
only its own caller. Requests are taken in arrival order, and a caller that gave up (was
cancelled) before its batch was taken is left out, as when it waited for the lock itself.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class Pending(Generic[T]):
    """One request in a batch, and its caller's answer."""

    request: T
    answer: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def fail(self, error: BaseException) -> None:
        """Refuse this request alone: its caller gets error."""
        if not self.answer.done():
            self.answer.set_exception(error)

    def succeed(self) -> None:
        if not self.answer.done():
            self.answer.set_result(None)


class GroupCommit(Generic[T]):
    """Writes requests in batches through `write`, called under `lock` with every request
    that arrived until the lock was taken, in order (so all that queued behind another
    holder of the lock go in one batch). write refuses single requests with Pending.fail;
    the others succeed when it returns (so it must return only once they are durable); if it
    raises, the batch is written again one request at a time, still under the lock. after,
    if given, runs once the batch is answered, before the lock is let go; it must not raise."""

    def __init__(self, lock: AbstractAsyncContextManager[Any],
                 write: Callable[[list[Pending[T]]], Awaitable[None]],
                 after: Callable[[], Awaitable[None]] | None = None) -> None:
        self._lock = lock
        self._write = write
        self._after = after
        self._queue: list[Pending[T]] = []
        self._writer: asyncio.Task[None] | None = None
        self.unanswered = 0  # requests submitted and not answered yet

    async def submit(self, request: T) -> None:
        """Return once request is written; raise what write refused it with."""
        pending = Pending(request)
        self._queue.append(pending)
        self.unanswered += 1
        try:
            if self._writer is None or self._writer.done():
                # A context of its own: the writer must not run as whichever caller started
                # it (e.g. under that task's leader epoch).
                self._writer = asyncio.create_task(self._drain(), context=contextvars.Context())
            await pending.answer
        finally:
            self.unanswered -= 1

    async def wait_idle(self) -> None:
        """Until every request submitted so far is answered (before closing the store)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _drain(self) -> None:
        batch: list[Pending[T]] = []
        try:
            while self._queue:
                batch = []
                try:
                    async with self._lock:
                        batch, self._queue = self._queue, []
                        await self._write_batch([p for p in batch if not p.answer.done()])
                        if self._after is not None:
                            await self._after()
                except Exception as exc:
                    if not batch:  # taking the lock failed: nothing was written
                        failed, self._queue = self._queue, []
                        for pending in failed:
                            pending.fail(exc)
        except BaseException:  # cancelled (shutdown): nobody may be left waiting
            for pending in [*batch, *self._queue]:
                pending.fail(RuntimeError("the coordinator stopped before writing this"))
            raise

    async def _write_batch(self, batch: list[Pending[T]]) -> None:
        try:
            await self._write(batch)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].fail(exc)
                return
            for pending in batch:  # which one broke the batch: each alone now
                if not pending.answer.done():
                    await self._write_batch([pending])
            return
        for pending in batch:
            pending.succeed()
