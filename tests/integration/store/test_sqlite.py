"""What is particular to the SQLite store: the file, other processes, schema migrations."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from coordinator.domain.model import Machine
from coordinator.domain.records import Event
from coordinator.store import postgres_schema
from coordinator.store import sqlite as sqlite_store
from coordinator.store.base import StoreError
from coordinator.store.codec import machine_to_doc, spec_to_json
from coordinator.store.sql import SchemaVersions
from coordinator.store.sqlite import MIGRATIONS, SQLiteStore
from tests.integration.store.samples import (
    BEFORE_LISTED_COLUMNS,
    BEFORE_LOWERCASED_HOSTNAMES,
    BEFORE_RESPONDING_COLUMN,
    assert_hostnames_found_lowercased,
    assert_listed_found,
    assert_responding_kept,
    old_insert,
)
from tests.integration.store.test_store import used
from tests.support.builders import ONE_ITEM, cluster, full_machine

ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version")]


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "coordinator.db")
    await opened.open()
    yield opened
    await opened.close()


async def test_another_process_reads_what_was_committed_while_the_store_is_open(
        db: SQLiteStore) -> None:
    m = full_machine()
    await db.commit([m], [Event(time=1.0, cluster="edge", kind="registered", message="hi")])
    result = run_python(f"""
        import asyncio, json
        from coordinator.store.codec import machine_to_doc
        from coordinator.store.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore({str(db.path)!r})
            await store.open()
            found = await store.get_machine("m-1")
            events = await store.list_events()
            await store.close()
            print(json.dumps([machine_to_doc(found, None), [e.kind for e in events]]))

        asyncio.run(main())
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [machine_to_doc(m, None), ["registered"]]
    assert (db.path.parent / f"{db.path.name}-wal").exists()


async def test_a_commit_survives_its_process_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    result = run_python(f"""
        import asyncio, os, signal
        from coordinator.domain.model import Machine
        from coordinator.store.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore({str(path)!r})
            await store.open()
            await store.commit([Machine(id="m-1", cluster="edge", hostname="h", ip=None)])
            os.kill(os.getpid(), signal.SIGKILL)  # no close(), no checkpoint

        asyncio.run(main())
    """)
    assert result.returncode == -9, result.stderr
    store = SQLiteStore(path)
    await store.open()
    try:
        assert [m.id for m in await store.list_machines()] == ["m-1"]
    finally:
        await store.close()


async def test_a_commit_waits_for_another_writer_without_blocking_the_event_loop(
        db: SQLiteStore) -> None:
    other = sqlite3.connect(db.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        committing = asyncio.create_task(db.commit([full_machine()]))
        await asyncio.sleep(0.3)  # the event loop runs on: the commit waits on the store's thread
        assert not committing.done()  # waiting for the lock (busy timeout), not failed
    finally:
        other.execute("ROLLBACK")
        other.close()
    await asyncio.wait_for(committing, 5)
    assert [m.id for m in await db.list_machines()] == ["m-1"]


async def test_the_file_is_in_wal_mode_with_full_sync_and_foreign_keys(db: SQLiteStore) -> None:
    with sqlite3.connect(db.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert [await db.pragma(p) for p in ("synchronous", "foreign_keys")] == [2, 1]  # FULL, ON


async def test_a_new_database_gets_the_latest_schema(db: SQLiteStore) -> None:
    assert versions(db.path) == list(range(1, len(MIGRATIONS) + 1))


async def test_a_database_from_a_newer_coordinator_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (len(MIGRATIONS) + 1,))
    newer = SQLiteStore(path)
    with pytest.raises(StoreError, match=rf"schema version {len(MIGRATIONS) + 1} is newer than "
                                         rf"this coordinator supports \({len(MIGRATIONS)}\)"):
        await newer.open()
    with pytest.raises(StoreError, match="not open"):
        await newer.list_machines()
    assert versions(path)[-1] == len(MIGRATIONS) + 1


async def test_an_older_database_is_migrated_and_keeps_its_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "coordinator.db"
    store = SQLiteStore(path)
    await store.open()
    await store.commit([full_machine()])
    await store.close()

    monkeypatch.setattr(sqlite_store, "MIGRATIONS", [*MIGRATIONS, """
        ALTER TABLE machines ADD COLUMN zone TEXT;
        UPDATE machines SET zone = 'a';
        CREATE INDEX machines_zone ON machines (zone);
    """])
    upgraded = SQLiteStore(path)
    await upgraded.open()
    try:
        assert await upgraded.get_machine("m-1") == full_machine()
    finally:
        await upgraded.close()
    assert versions(path) == list(range(1, len(MIGRATIONS) + 2))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT zone FROM machines").fetchall() == [("a",)]


async def test_a_file_from_before_the_stores_agreed_opens_at_the_numbers_both_now_use(
        tmp_path: Path) -> None:
    """SQLite kept its numbers when PostgreSQL's were made the same: a file at its latest
    version then (every migration it has) opens unchanged, at PostgreSQL's latest too."""
    path = tmp_path / "coordinator.db"
    with sqlite3.connect(path) as conn:
        conn.execute(SchemaVersions.table)
        for number, script in enumerate(MIGRATIONS, start=1):
            conn.executescript(script)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (number, number))
        conn.execute(old_insert(full_machine(), True))
    store = SQLiteStore(path)
    await store.open()
    try:
        assert await store.get_machine("m-1") == full_machine()
    finally:
        await store.close()
    assert versions(path) == list(range(1, len(postgres_schema.MIGRATIONS) + 1))


@contextlib.asynccontextmanager
async def upgraded_from(version: int, machines: Sequence[Machine], responding: bool,
                        path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SQLiteStore]:
    """The store of a file at schema `version` holding machines as that coordinator wrote
    them (with a responding column or not), opened by this one."""
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS[:version])
    old = SQLiteStore(path)
    await old.open()
    await old.close()
    with sqlite3.connect(path) as conn:
        for m in machines:
            conn.execute(old_insert(m, responding))
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS)
    upgraded = SQLiteStore(path)
    await upgraded.open()
    try:
        yield upgraded
    finally:
        await upgraded.close()


async def test_machines_stored_before_the_responding_column_keep_their_responding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 3 -> 4 copies each document's `responding` into the column that /metrics and
    authentication read."""
    async with upgraded_from(3, BEFORE_RESPONDING_COLUMN, False, tmp_path / "coordinator.db",
                             monkeypatch) as upgraded:
        await assert_responding_kept(upgraded)


async def test_machines_stored_before_the_listed_columns_are_listed_by_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 8 -> 9 copies each document's ip, role, state_since and labels into the
    columns and rows GET /v1/machines selects and sorts on."""
    async with upgraded_from(8, BEFORE_LISTED_COLUMNS, True, tmp_path / "coordinator.db",
                             monkeypatch) as upgraded:
        await assert_listed_found(upgraded)


async def test_machines_stored_before_hostnames_were_lowercased_are_found_by_either_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 9 -> 10 indexes lower(hostname), which registration and look-ups by name
    compare: names registered twice in two cases before it stay, found by either."""
    async with upgraded_from(9, BEFORE_LOWERCASED_HOSTNAMES, True, tmp_path / "coordinator.db",
                             monkeypatch) as upgraded:
        await assert_hostnames_found_lowercased(upgraded)


async def test_a_failing_migration_leaves_the_database_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "coordinator.db"
    store = SQLiteStore(path)
    await store.open()
    await store.close()

    monkeypatch.setattr(sqlite_store, "MIGRATIONS", [*MIGRATIONS, """
        CREATE TABLE extra (x INTEGER);
        INSERT INTO no_such_table VALUES (1);
    """])
    with pytest.raises(StoreError, match="no such table: no_such_table"):
        await SQLiteStore(path).open()
    assert versions(path) == list(range(1, len(MIGRATIONS) + 1))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchall() == []


async def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    path.write_text("not a database, " * 100)
    with pytest.raises(StoreError, match=str(path)):
        await SQLiteStore(path).open()



async def test_join_tokens_of_a_version_1_database_keep_working_after_the_upgrade(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 2 gave join tokens ids, expiry, use counts and revocation: a token created
    before it still admits machines, without expiry or limit."""
    path = tmp_path / "coordinator.db"
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS[:1])
    old = SQLiteStore(path)
    await old.open()
    await old.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # as version 1 wrote them
        conn.execute("INSERT INTO clusters VALUES ('edge', ?, 1, 1.0, 1.0, 0)",
                     (json.dumps(json.loads(spec_to_json(cluster(worker=ONE_ITEM)))),))
        conn.execute("INSERT INTO join_tokens (hash, cluster, created_at) VALUES (?, ?, ?)",
                     ("a" * 64, "edge", 2.0))
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS)
    upgraded = SQLiteStore(path)
    await upgraded.open()
    try:
        token, counted = await used(upgraded, "a" * 64, 3.0)
        assert counted and token is not None
        assert (token.id, token.expires_at, token.max_uses, token.uses) == ("a" * 12, None, None, 1)
    finally:
        await upgraded.close()
    assert versions(path) == list(range(1, len(MIGRATIONS) + 1))
