"""The embedded default store: one SQLite file, driven from two dedicated threads.

sqlite3 calls block, so they run on worker threads: the event loop never waits on disk.
Writes go through one connection on one thread, so they are serialized without any locking
of our own; reads go through a second connection on a second thread, so that an agent's
heartbeat or long-poll never queues behind a commit's fsync (issue 8). WAL lets readers (that
connection, backups, a CLI) read while the coordinator writes, and a read sees every commit
that returned before it started; synchronous=FULL makes every returned commit survive a
power cut.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from coordinator.domain.model import ClusterSpec, Machine, Role
from coordinator.domain.records import (
    AdminToken,
    CredentialOwner,
    Event,
    JoinToken,
    MachineCount,
    StoredCluster,
)
from coordinator.domain.tokens import token_id
from coordinator.store.base import Store, StoreError
from coordinator.store.codec import (
    admin_token_from_row,
    cluster_from_row,
    credential_owner_from_row,
    dumps,
    event_from_row,
    join_token_from_row,
    machine_count_from_row,
    machine_from_row,
    machine_to_row,
    spec_to_json,
)

T = TypeVar("T")

BUSY_TIMEOUT_SECONDS = 10.0
LOOKUP_BUSY_TIMEOUT_SECONDS = 1.0  # on the event loop's thread: see SQLiteStore._one

# Schema migrations in order: MIGRATIONS[n] takes a database from version n to n + 1.
# Append only; never edit one that has shipped.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE clusters (
        name TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        generation INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        deleting INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE join_tokens (
        hash TEXT PRIMARY KEY,
        cluster TEXT NOT NULL REFERENCES clusters (name),
        created_at REAL NOT NULL
    );
    CREATE INDEX join_tokens_cluster ON join_tokens (cluster);
    CREATE TABLE machines (
        id TEXT PRIMARY KEY,
        cluster TEXT NOT NULL,
        hostname TEXT NOT NULL,
        state TEXT NOT NULL,
        credential_hash TEXT NOT NULL,
        last_seen REAL NOT NULL,
        doc TEXT NOT NULL
    );
    CREATE INDEX machines_cluster ON machines (cluster, hostname);
    CREATE INDEX machines_credential ON machines (credential_hash);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        cluster TEXT NOT NULL,
        machine TEXT,
        hostname TEXT,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_cluster ON events (cluster, id);
    CREATE INDEX events_machine ON events (machine, id);
    """,
    # 1 -> 2: join tokens expire, count their uses and can be revoked; admin tokens with roles.
    """
    ALTER TABLE join_tokens ADD COLUMN id TEXT;
    UPDATE join_tokens SET id = substr(hash, 1, 12);
    CREATE UNIQUE INDEX join_tokens_id ON join_tokens (id);
    ALTER TABLE join_tokens ADD COLUMN expires_at REAL;
    ALTER TABLE join_tokens ADD COLUMN max_uses INTEGER;
    ALTER TABLE join_tokens ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE join_tokens ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE admin_tokens (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        role TEXT NOT NULL,
        created_at REAL NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 2 -> 3 (issue 8, scale): look-ups that must not scan the fleet. A query uses the role
    # index only when it spells the expression exactly as _ROLE does.
    """
    CREATE INDEX machines_hostname ON machines (hostname);
    CREATE INDEX machines_last_seen ON machines (cluster, last_seen);
    CREATE INDEX machines_role ON machines (cluster, json_extract(doc, '$.role'));
    """,
    # 3 -> 4 (issue 8, scale): whether a machine responds, as a column: /metrics counts the
    # fleet by it at every scrape and every agent request's authentication reads it.
    """
    ALTER TABLE machines ADD COLUMN responding INTEGER NOT NULL DEFAULT 1;
    UPDATE machines SET responding = COALESCE(json_extract(doc, '$.responding'), 0);
    """,
]
_ROLE = "json_extract(doc, '$.role')"
_IN_CHUNK = 500  # ids per `IN (...)`: far below SQLite's limit on bound parameters


def _statements(script: str) -> list[str]:
    """Split a script into statements: executescript() would commit our open transaction."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()!r}")
    return statements


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE takes the write lock up front, so a concurrent writer in another
    process waits (busy timeout) instead of failing at its first write."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply missing migrations, one transaction each. The version is read under the write
    lock, so two processes opening the same file never apply a migration twice."""
    latest = len(MIGRATIONS)
    while True:
        with _transaction(conn):
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version "
                         "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
            (current,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this coordinator supports "
                    f"({latest}): run a coordinator at least as new as the one that wrote it")
            if current == latest:
                return
            for statement in _statements(MIGRATIONS[current]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (current + 1, time.time()))


# json_extract parses the document in C: several times faster than decoding it into a Machine.
_CREDENTIAL_OWNER = """
    SELECT id, cluster, hostname, json_extract(doc, '$.credential_expires_at') AS expires_at,
           responding
    FROM machines WHERE credential_hash = ?
"""
_COUNT_MACHINES = """
    SELECT cluster, state, responding, COUNT(*) AS count
    FROM machines GROUP BY cluster, state, responding
"""


# A commit may carry a machine read before a heartbeat touched it: last_seen never goes back.
_UPSERT_MACHINE = """
    INSERT INTO machines (id, cluster, hostname, state, credential_hash, responding, last_seen,
                          doc)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (id) DO UPDATE SET
        cluster = excluded.cluster, hostname = excluded.hostname, state = excluded.state,
        credential_hash = excluded.credential_hash, responding = excluded.responding,
        last_seen = MAX(machines.last_seen, excluded.last_seen), doc = excluded.doc
"""


_USE_JOIN_TOKEN = """
    UPDATE join_tokens SET uses = uses + 1
    WHERE hash = ?1 AND revoked = 0 AND (expires_at IS NULL OR expires_at > ?2)
      AND (max_uses IS NULL OR uses < max_uses)
"""


def _read_only(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection that only reads (WAL: it never waits for the writer)."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA query_only = ON")
    return conn


class SQLiteStore(Store):
    """Store on one SQLite file; open() creates the file and brings its schema up to date."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._reader_executor: ThreadPoolExecutor | None = None
        self._reader_conn: sqlite3.Connection | None = None
        self._lookup_conn: sqlite3.Connection | None = None  # the event loop's own

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.path} is not open")
        return self._conn

    @property
    def _reader(self) -> sqlite3.Connection:
        if self._reader_conn is None:
            raise StoreError(f"store {self.path} is not open")
        return self._reader_conn

    async def _run(self, fn: Callable[..., T], *args: Any,
                   executor: ThreadPoolExecutor | None = None) -> T:
        """Run fn(*args) on the writer's thread (or executor's); sqlite errors become
        StoreError."""
        executor = executor or self._executor
        if executor is None:
            raise StoreError(f"store {self.path} is not open")
        return await asyncio.get_running_loop().run_in_executor(
            executor, partial(self._guarded, fn, *args))

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    async def _all(self, decode: Callable[[sqlite3.Row], T], sql: str,
                   params: Sequence[Any] = ()) -> list[T]:
        """On the reader's thread, where rows are decoded too: listing 10k machines does not
        stall the event loop."""
        return await self._run(lambda: [decode(row) for row in self._reader.execute(sql, params)],
                               executor=self._reader_executor)

    async def _one(self, decode: Callable[[sqlite3.Row], T], sql: str,
                   params: Sequence[Any]) -> T | None:
        """A row by its key, read on the event loop's own thread: an indexed lookup takes tens
        of microseconds, while a hop to the reader's thread and back waits for the GIL behind a
        busy event loop, several times for each read (every agent's credential and every
        long-poll's generation: at 10,000 agents those hops set the p99, issue 8)."""
        if self._lookup_conn is None:
            raise StoreError(f"store {self.path} is not open")
        try:
            rows = self._lookup_conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        return decode(rows[0]) if rows else None

    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        await self._run(lambda: self._db.execute(sql, params))

    # -- lifecycle --------------------------------------------------------------
    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._reader_executor = ThreadPoolExecutor(max_workers=1,
                                                   thread_name_prefix="sqlite-reader")
        try:
            await self._run(self._connect)
            await self._run(self._connect_reader, executor=self._reader_executor)
            # In WAL mode a reader waits for no writer; only another process's recovery of
            # the file (after a crash) can hold it up, for milliseconds.
            self._lookup_conn = _read_only(self.path, LOOKUP_BUSY_TIMEOUT_SECONDS)
        except BaseException:
            await self.close()
            raise

    def _connect(self) -> None:
        # isolation_level=None: no implicit transactions, _transaction() says where they are.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode != "wal":
                raise StoreError(f"{self.path}: cannot use WAL journaling (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            _migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _connect_reader(self) -> None:
        self._reader_conn = _read_only(self.path, BUSY_TIMEOUT_SECONDS)

    async def close(self) -> None:
        if self._lookup_conn is not None:
            self._lookup_conn.close()
            self._lookup_conn = None
        loop = asyncio.get_running_loop()
        if self._reader_executor is not None:
            await loop.run_in_executor(self._reader_executor, self._disconnect_reader)
            self._reader_executor.shutdown(wait=True)
            self._reader_executor = None
        if self._executor is None:
            return
        await loop.run_in_executor(self._executor, self._disconnect)
        self._executor.shutdown(wait=True)
        self._executor = None

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _disconnect_reader(self) -> None:
        if self._reader_conn is not None:
            self._reader_conn.close()
            self._reader_conn = None

    # -- clusters -------------------------------------------------------------
    async def put_cluster(self, spec: ClusterSpec, now: float) -> StoredCluster:
        return await self._run(self._put_cluster, spec, now)

    def _put_cluster(self, spec: ClusterSpec, now: float) -> StoredCluster:
        conn, text = self._db, spec_to_json(spec)
        with _transaction(conn):
            row = conn.execute("SELECT * FROM clusters WHERE name = ?", (spec.name,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO clusters (name, spec, generation, created_at, updated_at) "
                             "VALUES (?, ?, 1, ?, ?)", (spec.name, text, now, now))
                return StoredCluster(spec=spec, generation=1, created_at=now, updated_at=now)
            stored = cluster_from_row(row)
            # Compare re-encoded: a spec stored by an older model version (missing a field that
            # now has a default) is not a change.
            if spec_to_json(stored.spec) == text:
                return stored
            conn.execute("UPDATE clusters SET spec = ?, generation = generation + 1, updated_at = ? "
                         "WHERE name = ?", (text, now, spec.name))
            return replace(stored, spec=spec, generation=stored.generation + 1, updated_at=now)

    async def get_cluster(self, name: str) -> StoredCluster | None:
        return await self._one(cluster_from_row, "SELECT * FROM clusters WHERE name = ?", (name,))

    async def list_clusters(self) -> list[StoredCluster]:
        return await self._all(cluster_from_row, "SELECT * FROM clusters ORDER BY name")

    async def mark_cluster_deleting(self, name: str) -> None:
        await self._execute("UPDATE clusters SET deleting = 1 WHERE name = ?", (name,))

    async def remove_cluster(self, name: str) -> None:
        await self._run(self._remove_cluster, name)

    def _remove_cluster(self, name: str) -> None:
        conn = self._db
        with _transaction(conn):
            (machines,) = conn.execute(
                "SELECT COUNT(*) FROM machines WHERE cluster = ?", (name,)).fetchone()
            if machines:
                raise StoreError(f"cluster {name} still has {machines} machines: remove them first")
            conn.execute("DELETE FROM join_tokens WHERE cluster = ?", (name,))
            conn.execute("DELETE FROM clusters WHERE name = ?", (name,))

    # -- join tokens ------------------------------------------------------------
    async def add_join_token(self, cluster: str, token_hash: str, now: float,
                             expires_at: float | None, max_uses: int | None) -> JoinToken:
        token = JoinToken(id=token_id(token_hash), cluster=cluster, created_at=now,
                          expires_at=expires_at, max_uses=max_uses)
        await self._execute(
            "INSERT INTO join_tokens (id, hash, cluster, created_at, expires_at, max_uses) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (token.id, token_hash, cluster, now, expires_at, max_uses))
        return token

    async def list_join_tokens(self, cluster: str | None = None) -> list[JoinToken]:
        if cluster is None:
            return await self._all(join_token_from_row,
                                   "SELECT * FROM join_tokens ORDER BY created_at")
        return await self._all(join_token_from_row, "SELECT * FROM join_tokens WHERE cluster = ? "
                               "ORDER BY created_at", (cluster,))

    async def revoke_join_token(self, token_id: str) -> JoinToken | None:
        await self._execute("UPDATE join_tokens SET revoked = 1 WHERE id = ?", (token_id,))
        return await self._one(join_token_from_row, "SELECT * FROM join_tokens WHERE id = ?",
                               (token_id,))

    async def use_join_token(self, token_hash: str, now: float) -> tuple[JoinToken | None, bool]:
        return await self._run(self._use_join_token, token_hash, now)

    def _use_join_token(self, token_hash: str, now: float) -> tuple[JoinToken | None, bool]:
        conn = self._db
        with _transaction(conn):
            counted = conn.execute(_USE_JOIN_TOKEN, (token_hash, now)).rowcount == 1
            row = conn.execute("SELECT * FROM join_tokens WHERE hash = ?", (token_hash,)).fetchone()
        return (None if row is None else join_token_from_row(row)), counted

    # -- admin tokens -------------------------------------------------------------
    async def add_admin_token(self, token_hash: str, name: str, role: str,
                              now: float) -> AdminToken:
        token = AdminToken(id=token_id(token_hash), name=name, role=role, created_at=now)
        await self._execute("INSERT INTO admin_tokens (id, hash, name, role, created_at) "
                            "VALUES (?, ?, ?, ?, ?)", (token.id, token_hash, name, role, now))
        return token

    async def admin_token(self, token_hash: str) -> AdminToken | None:
        return await self._one(admin_token_from_row, "SELECT * FROM admin_tokens WHERE hash = ?",
                               (token_hash,))

    async def list_admin_tokens(self) -> list[AdminToken]:
        return await self._all(admin_token_from_row,
                               "SELECT * FROM admin_tokens ORDER BY created_at")

    async def revoke_admin_token(self, token_id: str) -> AdminToken | None:
        await self._execute("UPDATE admin_tokens SET revoked = 1 WHERE id = ?", (token_id,))
        return await self._one(admin_token_from_row, "SELECT * FROM admin_tokens WHERE id = ?",
                               (token_id,))

    # -- machines ---------------------------------------------------------------
    async def get_machine(self, machine_id: str) -> Machine | None:
        return await self._one(machine_from_row, "SELECT doc, last_seen FROM machines WHERE id = ?",
                               (machine_id,))

    async def machine_generation(self, machine_id: str) -> int | None:
        return await self._one(lambda row: int(row[0]), "SELECT json_extract(doc, "
                               "'$.generation') FROM machines WHERE id = ?", (machine_id,))

    async def credential_owner(self, credential_hash: str) -> CredentialOwner | None:
        if not credential_hash:  # machines without a credential store "": never match them
            return None
        return await self._one(credential_owner_from_row, _CREDENTIAL_OWNER, (credential_hash,))

    async def list_machines(self, cluster: str | None = None, role: Role | None = None) -> list[Machine]:
        """See Store.list_machines."""
        where, params = [], []
        if cluster is not None:
            where.append("cluster = ?")
            params.append(cluster)
        if role is not None:
            where.append(f"{_ROLE} = ?")
            params.append(role)
        # Without statistics SQLite would pick machines_cluster and decode every document.
        query = "SELECT doc, last_seen FROM machines" + (
            " INDEXED BY machines_role" if role and cluster is not None else "")
        if where:
            query += " WHERE " + " AND ".join(where)
        return await self._all(machine_from_row, query + " ORDER BY cluster, hostname, id", params)

    async def count_machines(self) -> list[MachineCount]:
        return await self._all(machine_count_from_row, _COUNT_MACHINES)

    async def get_machines(self, machine_ids: Collection[str]) -> list[Machine]:
        ids = list(machine_ids)
        found: list[Machine] = []
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start:start + _IN_CHUNK]
            found += await self._all(machine_from_row, "SELECT doc, last_seen FROM machines WHERE id IN "
                                     f"({', '.join('?' * len(chunk))})", chunk)
        return found

    async def machines_by_hostname(self, hostname: str, cluster: str | None = None) -> list[Machine]:
        if cluster is None:
            return await self._all(machine_from_row, "SELECT doc, last_seen FROM machines "
                                   "WHERE hostname = ? ORDER BY cluster", (hostname,))
        return await self._all(machine_from_row, "SELECT doc, last_seen FROM machines "
                               "WHERE cluster = ? AND hostname = ?", (cluster, hostname))

    async def machines_last_seen_between(self, cluster: str, start: float, end: float) -> list[str]:
        return await self._all(lambda row: str(row["id"]),
                               "SELECT id FROM machines WHERE cluster = ? AND last_seen >= ? "
                               "AND last_seen < ?", (cluster, start, end))

    async def touch_machines(self, seen: Mapping[str, float]) -> None:
        await self._run(self._touch_machines, list(seen.items()))

    def _touch_machines(self, seen: list[tuple[str, float]]) -> None:
        conn = self._db
        with _transaction(conn):
            conn.executemany("UPDATE machines SET last_seen = MAX(last_seen, ?) WHERE id = ?",
                             [(when, machine_id) for machine_id, when in seen])

    # -- atomic writes ----------------------------------------------------------
    async def commit(
        self,
        machines: Sequence[Machine] = (),
        events: Sequence[Event] = (),
        removed: Sequence[str] = (),
    ) -> list[Event]:
        return await self._run(self._commit, machines, events, removed)

    def _commit(self, machines: Sequence[Machine], events: Sequence[Event],
                removed: Sequence[str]) -> list[Event]:
        conn = self._db
        stored: list[Event] = []
        with _transaction(conn):
            for m in machines:
                conn.execute(_UPSERT_MACHINE, machine_to_row(m))
            conn.executemany("DELETE FROM machines WHERE id = ?", [(i,) for i in removed])
            for e in events:
                cursor = conn.execute(
                    "INSERT INTO events (time, cluster, machine, hostname, kind, message, data) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (e.time, e.cluster, e.machine, e.hostname, e.kind, e.message, dumps(e.data)))
                stored.append(replace(e, id=cursor.lastrowid))
        return stored

    # -- events -----------------------------------------------------------------
    async def list_events(
        self,
        cluster: str | None = None,
        machine: str | None = None,
        since_id: int = 0,
        since_time: float | None = None,
        limit: int = 1000,
        *,
        kinds: Sequence[str] | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """See Store.list_events."""
        where = ["id > ?"]
        params: list[Any] = [since_id]
        if cluster is not None:
            where.append("cluster = ?")
            params.append(cluster)
        if machine is not None:
            where.append("machine = ?")
            params.append(machine)
        if since_time is not None:
            where.append("time >= ?")
            params.append(since_time)
        if kinds is not None:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})" if kinds else "0")
            params.extend(kinds)
        order = "DESC" if newest_first else "ASC"
        query = f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id {order} LIMIT ?"
        return await self._all(event_from_row, query, (*params, limit))
