"""Garbage collection as `coordinator serve` runs it (coordinator/gcpolicy.py), for a bench
that measures an in-process coordinator's latency: with 10,000 machines kept in memory,
CPython's own full collections stop it for 50-100 ms now and then, which serve never lets
happen, so without this a bench's p99 would measure the interpreter's default, not the
coordinator."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from coordinator.gcpolicy import GcPauses, GcPolicy


@contextlib.asynccontextmanager
async def serve_gc() -> AsyncIterator[GcPolicy]:
    """Start serve's policy once what the coordinator keeps is loaded; undone on leaving."""
    policy = GcPolicy(GcPauses())
    policy.start()
    task = asyncio.create_task(policy.run())
    try:
        yield policy
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        policy.stop()
