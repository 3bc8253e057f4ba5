"""Group commit: requests queued behind the lock are written as one batch, each answered
on its own, and a batch that fails as a whole is retried one request at a time."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.service.groupcommit import GroupCommit, Pending
from tests.support.waiting import wait_until_async


class Log:
    """A write that keeps what it committed, refuses "refused" alone, and fails the whole
    batch (as a transaction would) when it holds "poison"."""

    def __init__(self) -> None:
        self.committed: list[list[str]] = []
        self.batches: list[list[Pending[str]]] = []

    async def write(self, batch: list[Pending[str]]) -> None:
        self.batches.append(batch)
        await asyncio.sleep(0)  # a real write awaits its store
        for pending in batch:
            if pending.request == "refused":
                pending.fail(ValueError("refused"))
        if any(p.request == "poison" for p in batch):
            raise OSError("the transaction failed")
        self.committed.append([p.request for p in batch if not p.answer.done()])


async def submit_while_locked(group: GroupCommit[str], lock: asyncio.Lock,
                              requests: list[str]) -> list[object]:
    """Submit every request while another holds the lock; each caller's outcome."""
    async with lock:
        calls = [asyncio.create_task(group.submit(r)) for r in requests]
        await wait_until_async(lambda: group.unanswered == len(requests), 5,
                               "every request queued", interval=0)
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_requests_queued_behind_the_lock_are_one_batch_in_order() -> None:
    log, lock = Log(), asyncio.Lock()
    group = GroupCommit(lock, log.write)
    outcomes = await submit_while_locked(group, lock, ["a", "refused", "b", "c"])
    assert outcomes[0] is None and outcomes[2:] == [None, None]
    assert isinstance(outcomes[1], ValueError)
    assert log.committed == [["a", "b", "c"]]


async def test_a_batch_that_fails_as_a_whole_is_retried_one_by_one() -> None:
    log, lock = Log(), asyncio.Lock()
    group = GroupCommit(lock, log.write)
    outcomes = await submit_while_locked(group, lock, ["a", "poison", "b"])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], OSError)
    assert log.committed == [["a"], ["b"]]


async def test_a_caller_that_gave_up_before_its_batch_is_left_out() -> None:
    log, lock = Log(), asyncio.Lock()
    group = GroupCommit(lock, log.write)
    async with lock:
        kept = asyncio.create_task(group.submit("kept"))
        dropped = asyncio.create_task(group.submit("dropped"))
        await wait_until_async(lambda: group.unanswered == 2, 5, "both requests queued",
                               interval=0)
        dropped.cancel()
    await kept
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert log.committed == [["kept"]]


async def test_after_runs_once_the_batch_is_answered_and_before_the_lock_is_let_go() -> None:
    """What runs after a batch (the reconcile pass after item reports) sees its callers
    answered, and nobody queued for the lock meanwhile gets in before it."""
    log, lock = Log(), asyncio.Lock()
    seen: list[tuple[str, object]] = []

    async def after() -> None:
        seen.append(("answered", [p.answer.done() for p in log.batches[-1]]))
        await asyncio.sleep(0)  # a real pass awaits its store: the lock must stay held
        seen.append(("after", lock.locked()))

    async def waiter() -> None:
        async with lock:
            seen.append(("waiter", None))

    group = GroupCommit(lock, log.write, after=after)
    async with lock:
        calls = [asyncio.create_task(group.submit(r)) for r in ("a", "b")]
        await wait_until_async(lambda: group.unanswered == 2, 5, "both requests queued",
                               interval=0)
    waiting = asyncio.create_task(waiter())  # queued behind the batch's writer
    await asyncio.gather(*calls, waiting)
    assert log.committed == [["a", "b"]]
    assert seen == [("answered", [True, True]), ("after", True), ("waiter", None)]
