"""A served coordinator holding thousands of machines in seconds: written straight into its
stopped SQLite store (registering them over the API would take minutes), then served again."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import psutil

from coordinator.domain.model import Machine, MachineState
from coordinator.server import datadir, secrets_key
from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import fleet_machine
from tests.support.harness import ServedCoordinator

BATCH = 500


def pending_machine(index: int, cluster: str, now: float) -> Machine:
    """A fleet machine waiting for approval, heard from at now: nothing for the reconciler to
    do with it until an operator approves it, so a seeded coordinator stays quiet."""
    return replace(fleet_machine(index, cluster), state=MachineState.PENDING, role=None,
                   approved=False, applied=frozenset(), progress=None, created_at=now,
                   state_since=now, last_seen=now)


def seed(served: ServedCoordinator, machines: list[Machine]) -> None:
    """Stop served, commit machines into its store, serve again."""
    served.stop()

    async def write() -> None:
        store = SQLiteStore(served.data / datadir.DATABASE,
                            secrets_key.load(served.data / secrets_key.FILE_NAME))
        await store.open()
        try:
            for start in range(0, len(machines), BATCH):
                await store.commit(machines[start:start + BATCH])
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as thread:  # a loop of its own: Playwright's may run in this one
        thread.submit(asyncio.run, write()).result()
    served.start()
    settled(served.pid)


def settled(pid: int, idle: float = 0.1, most: float = 120.0) -> None:
    """Once the process uses under idle of a core over half a second: a coordinator started
    on thousands of machines first loads and reconciles them all, which is not what a test
    or bench of its steady state measures."""
    process = psutil.Process(pid)
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        before = sum(process.cpu_times()[:2])
        time.sleep(0.5)
        if sum(process.cpu_times()[:2]) - before < idle * 0.5:
            return
    raise AssertionError(f"process {pid} still busy after {most:.0f} s")
