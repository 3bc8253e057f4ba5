"""A registration costs the store the same work however many machines the fleet holds:
registering a fleet is linear, not quadratic (issue 36). Counted, not timed: SQLite's virtual
machine steps over every connection of the real store, which a read of the fleet (a list, a
scan, a count) would grow with the machines seeded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import TEST_CIPHER, registration
from tests.support.harness import in_process_coordinator
from tests.support.seeding import pending_machine

SEED_BATCH = 500


class CountingStore(SQLiteStore):
    """The real SQLite store, counting the steps its connections' statements take (rows
    visited, index entries compared, rows written): each connection's progress handler is
    set on the thread that uses it."""

    steps = 0

    def _step(self) -> int:
        self.steps += 1
        return 0  # go on

    def _counted(self, conn: sqlite3.Connection | None) -> None:
        assert conn is not None
        conn.set_progress_handler(self._step, 1)

    def _connect(self) -> None:
        super()._connect()
        self._counted(self._conn)

    def _connect_reader(self) -> None:
        super()._connect_reader()
        self._counted(self._reader_conn)

    async def open(self) -> None:
        await super().open()
        self._counted(self._lookup_conn)


async def registration_steps(directory: Path, fleet: int) -> int:
    """The store's steps for one agent's registration, the reconcile pass it asks for and its
    first assignment, in a cluster already holding fleet Pending machines."""
    directory.mkdir()
    store = CountingStore(directory / "coordinator.db", TEST_CIPHER)
    async with in_process_coordinator(directory, store=store) as env:
        seeded = [pending_machine(i, "lab", env.clock()) for i in range(fleet)]
        for start in range(0, fleet, SEED_BATCH):
            await store.commit(seeded[start:start + SEED_BATCH])
        await env.coordinator.reconciler.reconcile_once()  # loads the cluster: start-up's
        token = await env.join_token()
        before = store.steps
        agent = await env.call("POST", "/v1/agent/register", 201,
                               json=registration("newcomer", token, checks=13),
                               headers={"Authorization": f"Bearer {token}"})
        await env.coordinator.reconciler.reconcile_once()
        assert (await env.assignment(agent))["state"] == "Pending"
        return store.steps - before


async def test_one_registration_reads_as_much_at_2000_machines_as_at_50(tmp_path: Path) -> None:
    small = await registration_steps(tmp_path / "small", 50)
    large = await registration_steps(tmp_path / "large", 2000)
    assert large == small, f"a registration took {small} store steps beside 50 machines, " \
                           f"{large} beside 2000: something in it reads the fleet"
