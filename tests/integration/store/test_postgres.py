"""What is particular to the PostgreSQL store: migrations under concurrent replicas, connection
errors, and what replicas share through it: leader election, fencing, the mutex, NOTIFY."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import pytest

from coordinator.domain.changes import Change
from coordinator.domain.model import Machine
from coordinator.domain.records import Event
from coordinator.store import postgres as postgres_store
from coordinator.store import postgres_connections, sqlite_schema
from coordinator.store.base import Fenced, StoreError, leader_epoch
from coordinator.store.postgres import MIGRATIONS, PostgresStore
from coordinator.store.postgres_connections import LEADER_LOCK, MUTEX_LOCK
from coordinator.store.sql import SchemaVersions
from tests.integration.store.samples import (
    BEFORE_LISTED_COLUMNS,
    BEFORE_LOWERCASED_HOSTNAMES,
    BEFORE_RESPONDING_COLUMN,
    assert_hostnames_found_lowercased,
    assert_listed_found,
    assert_responding_kept,
    old_insert,
)
from tests.support.builders import full_machine
from tests.support.ports import free_port
from tests.support.postgres import Postgres, holder_of, terminate
from tests.support.waiting import wait_until_async


@pytest.fixture
def dsn(postgres: Postgres) -> Iterator[str]:
    with postgres.database() as fresh:
        yield fresh


@pytest.fixture
async def replicas(dsn: str) -> AsyncIterator[Callable[[], PostgresStore]]:
    """Opens stores on the one database, as replicas would; closes them all at the end."""
    opened: list[PostgresStore] = []

    def open_one() -> PostgresStore:
        store = PostgresStore(dsn)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


def versions(postgres: Postgres, dsn: str) -> list[int]:
    out = postgres.psql("SELECT version FROM schema_version ORDER BY version", dsn)
    return [int(v) for v in out.split()]


def event(kind: str = "state") -> Event:
    return Event(time=1.0, cluster="edge", kind=kind, message=kind)


# -- schema ---------------------------------------------------------------------------------


async def test_replicas_opening_a_new_database_together_migrate_it_once(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    await asyncio.gather(*(replicas().open() for _ in range(4)))
    assert versions(postgres, dsn) == list(range(1, len(MIGRATIONS) + 1))


async def test_a_database_from_a_newer_coordinator_is_refused(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    await replicas().open()
    postgres.psql(f"INSERT INTO schema_version VALUES ({len(MIGRATIONS) + 1}, 0)", dsn)
    newer = replicas()
    with pytest.raises(StoreError, match=rf"schema version {len(MIGRATIONS) + 1} is newer than "
                                         rf"this coordinator supports \({len(MIGRATIONS)}\)"):
        await newer.open()
    with pytest.raises(StoreError, match="not open"):
        await newer.list_machines()


async def test_a_failing_migration_leaves_the_database_as_it_was(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore],
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = replicas()
    await first.open()
    await first.commit([full_machine()])
    monkeypatch.setattr(postgres_store, "MIGRATIONS", [*MIGRATIONS, """
        CREATE TABLE extra (x INTEGER);
        INSERT INTO no_such_table VALUES (1);
    """])
    with pytest.raises(StoreError, match='relation "no_such_table" does not exist'):
        await replicas().open()
    assert versions(postgres, dsn) == list(range(1, len(MIGRATIONS) + 1))
    assert postgres.psql("SELECT to_regclass('extra') IS NULL", dsn) == "t"
    assert await first.get_machine("m-1") == full_machine()


async def upgraded_from(version: int, machines: Sequence[Machine], responding: bool,
                        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore],
                        monkeypatch: pytest.MonkeyPatch) -> PostgresStore:
    """A replica of this coordinator opened on a database at schema `version` holding
    machines as that coordinator wrote them (with a responding column or not)."""
    monkeypatch.setattr(postgres_store, "MIGRATIONS", MIGRATIONS[:version])
    await replicas().open()
    for m in machines:
        postgres.psql(old_insert(m, responding), dsn)
    monkeypatch.setattr(postgres_store, "MIGRATIONS", MIGRATIONS)
    upgraded = replicas()
    await upgraded.open()
    return upgraded


async def test_machines_stored_before_the_responding_column_keep_their_responding(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 3 -> 4 copies each document's `responding` into the column that /metrics and
    authentication read."""
    await assert_responding_kept(await upgraded_from(
        3, BEFORE_RESPONDING_COLUMN, False, postgres, dsn, replicas, monkeypatch))


async def test_machines_stored_before_the_listed_columns_are_listed_by_them(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 8 -> 9 copies each document's ip, role, state_since and labels into the
    columns and rows GET /v1/machines selects and sorts on."""
    await assert_listed_found(await upgraded_from(
        8, BEFORE_LISTED_COLUMNS, True, postgres, dsn, replicas, monkeypatch))


async def test_machines_stored_before_hostnames_were_lowercased_are_found_by_either_case(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 9 -> 10 indexes lower(hostname), which registration and look-ups by name
    compare: names registered twice in two cases before it stay, found by either."""
    await assert_hostnames_found_lowercased(await upgraded_from(
        9, BEFORE_LOWERCASED_HOSTNAMES, True, postgres, dsn, replicas, monkeypatch))


# The migrations as a coordinator numbered them before PostgreSQL's numbers were SQLite's:
# the same scripts, without the mark of the numbering (1 -> 2), so its version n from 2 on is
# SQLite's n + 1.
NUMBERED_BEFORE = [MIGRATIONS[0], *MIGRATIONS[2:]]


def numbered_before(postgres: Postgres, dsn: str, version: int) -> None:
    """The database as that coordinator left it at its schema `version`."""
    postgres.psql(SchemaVersions.table, dsn)
    for number, script in enumerate(NUMBERED_BEFORE[:version], start=1):
        postgres.psql(f"{script}; INSERT INTO schema_version VALUES ({number}, {number})", dsn)


async def test_a_database_numbered_before_the_stores_agreed_opens_at_sqlites_numbers(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    """Its versions move one on once, whichever of the replicas opening it together does it,
    and its data stays; it is at the version a SQLite file of the same schema is."""
    numbered_before(postgres, dsn, len(NUMBERED_BEFORE))
    postgres.psql(old_insert(full_machine(), True), dsn)
    await asyncio.gather(*(replicas().open() for _ in range(3)))
    assert versions(postgres, dsn) == list(range(1, len(sqlite_schema.MIGRATIONS) + 1))
    reopened = replicas()
    await reopened.open()
    assert versions(postgres, dsn) == list(range(1, len(sqlite_schema.MIGRATIONS) + 1))
    assert await reopened.get_machine("m-1") == full_machine()


async def test_a_database_numbered_before_at_an_older_version_goes_on_from_where_it_was(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    """At that coordinator's version 7, before the listed columns (SQLite's 8): migrated from
    there, its machines are listed by the columns the migration fills."""
    numbered_before(postgres, dsn, 7)
    for m in BEFORE_LISTED_COLUMNS:
        postgres.psql(old_insert(m, True), dsn)
    upgraded = replicas()
    await upgraded.open()
    assert versions(postgres, dsn) == list(range(1, len(MIGRATIONS) + 1))
    await assert_listed_found(upgraded)


async def test_an_unreachable_database_is_a_store_error_that_hides_the_password() -> None:
    port = free_port()
    store = PostgresStore(f"postgresql://coordinator:s3cret@127.0.0.1:{port}/state")
    with pytest.raises(StoreError) as refused:
        await store.open()
    message = str(refused.value)
    assert f"postgresql://coordinator@127.0.0.1:{port}/state" in message
    assert "s3cret" not in message


async def test_closing_ends_a_connection_still_in_use_instead_of_waiting_for_it(
        replicas: Callable[[], PostgresStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection a caller never gives back (a query stuck on a lost server) keeps a graceful
    close waiting for ever: the coordinator's shutdown hung on it. Closing ends it in time."""
    monkeypatch.setattr(postgres_connections, "CLOSE_SECONDS", 1.0)
    store = replicas()
    await store.open()
    await store.db.pool().acquire()  # never released
    started = time.monotonic()
    await asyncio.wait_for(store.close(), 10)
    assert time.monotonic() - started < 5


async def test_a_mutex_left_while_the_store_closes_gives_its_connection_back(
        replicas: Callable[[], PostgresStore]) -> None:
    """A section holding the mutex when the store begins to close (a shutdown during a
    reconcile pass) gives its connection back to the pool it came from, so the close ends as
    soon as the section does, not at its bound (it could not, and the close waited for ever)."""
    store = replicas()
    await store.open()
    inside = asyncio.Event()

    async def section() -> None:
        async with store.mutex():
            inside.set()
            await asyncio.sleep(0.5)  # still inside as the store closes

    holder = asyncio.create_task(section())
    await inside.wait()
    started = time.monotonic()
    await store.close()
    await holder
    assert time.monotonic() - started < 3


# -- leader election and fencing ----------------------------------------------------------------


async def test_one_replica_leads_and_the_next_takes_over_when_it_resigns(
        replicas: Callable[[], PostgresStore]) -> None:
    first, second = replicas(), replicas()
    await first.open()
    await second.open()
    term = await first.campaign()
    assert term.epoch == 1
    waiting = asyncio.create_task(second.campaign())
    await asyncio.sleep(2.5)  # two election attempts at least
    assert not waiting.done()
    await first.close()  # a replica stopping resigns
    taken = await asyncio.wait_for(waiting, 5)
    assert taken.epoch == 2 and not taken.lost.is_set()


async def test_losing_the_lock_connection_ends_the_term_and_fences_the_old_leaders_writes(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    old, new = replicas(), replicas()
    await old.open()
    await new.open()
    await old.commit([full_machine()])
    term = await old.campaign()
    waiting = asyncio.create_task(new.campaign())
    terminate(postgres, holder_of(postgres, dsn, LEADER_LOCK))
    started = time.monotonic()
    await wait_until_async(term.lost.is_set, 5, "the old leader noticing")
    assert time.monotonic() - started < 1.0  # at once, not at the next probe
    elected = await asyncio.wait_for(waiting, 5)
    assert elected.epoch == term.epoch + 1  # type: ignore[operator]

    # A reconcile pass of the old term still on its way: refused, and nothing of it written.
    stale = leader_epoch.set(term.epoch)
    try:
        with pytest.raises(Fenced, match=rf"deposed \(leader epoch {term.epoch}, now "
                                         rf"{elected.epoch}\)"):
            await old.commit([full_machine(hostname="stale")], [event()])
        with pytest.raises(Fenced):
            await old.apply(Change(dropped=["edge"]))
    finally:
        leader_epoch.reset(stale)
    assert await new.get_machine("m-1") == full_machine()
    assert await new.list_events() == []

    # The new leader's work, and anything that is not leader work, goes through.
    current = leader_epoch.set(elected.epoch)
    try:
        await new.commit([full_machine(hostname="fresh")])
    finally:
        leader_epoch.reset(current)
    await old.commit(events=[event("audit")])  # an API request the old replica still serves
    assert (await new.get_machine("m-1")).hostname == "fresh"  # type: ignore[union-attr]
    assert [e.kind for e in await new.list_events()] == ["audit"]


# -- the mutex ------------------------------------------------------------------------------------


async def test_the_mutex_is_held_by_one_replica_at_a_time(
        replicas: Callable[[], PostgresStore]) -> None:
    first, second = replicas(), replicas()
    await first.open()
    await second.open()
    order: list[str] = []

    async def section(store: PostgresStore, name: str, hold: float) -> None:
        async with store.mutex():
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    holder = asyncio.create_task(section(first, "first", 0.5))
    await wait_until_async(lambda: order == ["first in"], message="the first in the mutex")
    await section(second, "second", 0)
    await holder
    assert order == ["first in", "first out", "second in", "second out"]


async def test_a_holder_that_lost_the_mutex_cannot_write_unprotected(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    store, other = replicas(), replicas()
    await store.open()
    await other.open()
    async with store.mutex():
        terminate(postgres, holder_of(postgres, dsn, MUTEX_LOCK))
        with pytest.raises(StoreError):
            await store.commit([full_machine()])
        async with asyncio.timeout(5), other.mutex():  # the lock went with the connection
            pass
    assert await other.list_machines() == []
    await store.commit([full_machine()])  # the store itself goes on with other connections
    assert len(await other.list_machines()) == 1


async def test_heartbeats_written_while_a_commit_writes_the_same_machines_never_deadlock(
        replicas: Callable[[], PostgresStore]) -> None:
    """The heartbeat flush runs outside the mutex, beside commits (issue 8's rollout
    benchmark hit PostgreSQL's deadlock detection, which fails one of the two after 1 s)."""
    store = replicas()
    await store.open()
    machines = [full_machine(f"m-{n:03d}") for n in range(300)]
    await store.commit(machines)
    for round_ in range(5):
        seen = {m.id: 100.0 + round_ for m in machines}  # one order...
        await asyncio.gather(store.commit(machines[::-1]),  # ...and the other
                             store.touch_machines(seen), store.touch_machines(seen))
    assert {m.last_seen for m in await store.list_machines()} == {104.0}


# -- LISTEN/NOTIFY --------------------------------------------------------------------------------


async def test_published_messages_reach_the_other_replicas_and_a_lost_listener_reconnects(
        postgres: Postgres, dsn: str, replicas: Callable[[], PostgresStore]) -> None:
    listener, sender = replicas(), replicas()
    await listener.open()
    await sender.open()
    received: list[str] = []
    assert await listener.listen(received.append)
    await sender.publish("hello")
    sent = time.monotonic()
    await wait_until_async(lambda: received == ["hello"], 5, "the message")
    assert time.monotonic() - sent < 0.5
    pid = int(postgres.psql("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%' "
                            "AND datname = current_database()", dsn))
    terminate(postgres, pid)
    # Messages sent while it was away are lost: it says so ("") once it is back.
    await wait_until_async(lambda: received == ["hello", ""], 5, "the reconnection")
    await sender.publish("again")
    await wait_until_async(lambda: received[-1] == "again", 5, "a message after the reconnection")
