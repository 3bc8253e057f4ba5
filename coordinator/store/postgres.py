"""The store for several coordinator replicas: one PostgreSQL database, through asyncpg.

Besides the state, the database carries what the replicas need from each other: the leader
election (a session advisory lock held on a dedicated connection), the leader epoch that fences
a deposed leader's writes, a mutex for read-modify-write sequences of machines (another
advisory lock), and wake-ups of long-polling agents (LISTEN/NOTIFY).

Rows decode with the codec the SQLite store uses; text columns sort byte-wise (COLLATE "C"),
as SQLite's do, whatever the database's locale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg

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
from coordinator.store.base import Fenced, Store, StoreError, Term, leader_epoch
from coordinator.store.codec import (
    Row,
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
log = logging.getLogger("coordinator.store")

# Advisory lock keys (one 64-bit space per database): arbitrary, but fixed forever.
LEADER_LOCK = 0x6E61_0001
MUTEX_LOCK = 0x6E61_0002
MIGRATION_LOCK = 0x6E61_0003
CHANNEL = "nodeagent_coordinator"
_ROLE = "(doc::jsonb ->> 'role')"
_CREDENTIAL_OWNER = """
    SELECT id, cluster, hostname,
           (doc::jsonb ->> 'credential_expires_at')::double precision AS expires_at,
           responding
    FROM machines WHERE credential_hash = $1
"""
_COUNT_MACHINES = """
    SELECT cluster, state, responding, COUNT(*) AS count
    FROM machines GROUP BY cluster, state, responding
"""
RETRY_SECONDS = 1.0  # between election attempts, and reconnections of the listener
PROBE_SECONDS = 1.0  # the leader checks its lock connection this often
# A leader cut off from the database (not closed: silent) loses its lock when the server
# notices: keepalives make that seconds, not the kernel's two hours.
KEEPALIVES = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2",
              "tcp_keepalives_count": "2"}

# Schema migrations in order: MIGRATIONS[n] takes a database from version n to n + 1.
# Append only; never edit one that has shipped.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE clusters (
        name TEXT COLLATE "C" PRIMARY KEY,
        spec TEXT NOT NULL,
        generation BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        deleting BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE TABLE join_tokens (
        seq BIGSERIAL UNIQUE,
        id TEXT NOT NULL UNIQUE,
        hash TEXT PRIMARY KEY,
        cluster TEXT COLLATE "C" NOT NULL REFERENCES clusters (name),
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        max_uses BIGINT,
        uses BIGINT NOT NULL DEFAULT 0,
        revoked BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX join_tokens_cluster ON join_tokens (cluster);
    CREATE TABLE admin_tokens (
        seq BIGSERIAL UNIQUE,
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        role TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        revoked BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE TABLE machines (
        id TEXT COLLATE "C" PRIMARY KEY,
        cluster TEXT COLLATE "C" NOT NULL,
        hostname TEXT COLLATE "C" NOT NULL,
        state TEXT NOT NULL,
        credential_hash TEXT NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        doc TEXT NOT NULL
    );
    CREATE INDEX machines_cluster ON machines (cluster, hostname);
    CREATE INDEX machines_credential ON machines (credential_hash);
    CREATE TABLE events (
        id BIGINT PRIMARY KEY,
        time DOUBLE PRECISION NOT NULL,
        cluster TEXT NOT NULL,
        machine TEXT,
        hostname TEXT,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_cluster ON events (cluster, id);
    CREATE INDEX events_machine ON events (machine, id);
    -- Event ids are taken from this row, locked until the commit: they grow in commit order,
    -- so a reader paging with the last id it saw never skips an event committed later.
    CREATE TABLE event_ids (last BIGINT NOT NULL);
    INSERT INTO event_ids VALUES (0);
    CREATE TABLE leader (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        epoch BIGINT NOT NULL,
        holder TEXT,
        since DOUBLE PRECISION
    );
    INSERT INTO leader VALUES (1, 0, NULL, NULL);
    """,
    # 1 -> 2 (issue 8, scale): look-ups that must not scan the fleet. A query uses the role
    # index only when it spells the expression exactly as _ROLE does.
    """
    CREATE INDEX machines_hostname ON machines (hostname);
    CREATE INDEX machines_last_seen ON machines (cluster, last_seen);
    CREATE INDEX machines_role ON machines (cluster, ((doc::jsonb ->> 'role')));
    """,
    # 2 -> 3 (issue 8, scale): whether a machine responds, as a column: /metrics counts the
    # fleet by it at every scrape (parsing every document took 0.4 s of the server's CPU at
    # 10,000 machines) and every agent request's authentication reads it.
    """
    ALTER TABLE machines ADD COLUMN responding BOOLEAN NOT NULL DEFAULT TRUE;
    UPDATE machines SET responding = COALESCE((doc::jsonb ->> 'responding')::boolean, FALSE);
    """,
]

_UPSERT_MACHINE = """
    INSERT INTO machines (id, cluster, hostname, state, credential_hash, responding, last_seen,
                          doc)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (id) DO UPDATE SET
        cluster = excluded.cluster, hostname = excluded.hostname, state = excluded.state,
        credential_hash = excluded.credential_hash, responding = excluded.responding,
        last_seen = GREATEST(machines.last_seen, excluded.last_seen), doc = excluded.doc
"""

_USE_JOIN_TOKEN = """
    UPDATE join_tokens SET uses = uses + 1
    WHERE hash = $1 AND NOT revoked AND (expires_at IS NULL OR expires_at > $2)
      AND (max_uses IS NULL OR uses < max_uses)
    RETURNING *
"""

_INSERT_EVENT = """
    INSERT INTO events (id, time, cluster, machine, hostname, kind, message, data)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""

# What the driver raises when the database refuses or cannot be reached.
_DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


def describe(dsn: str) -> str:
    """The DSN without its password, to name the database in messages and logs."""
    parts = urlsplit(dsn)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}@" if parts.username else ""
    return f"postgresql://{user}{host}{port}{parts.path}"


@dataclass
class _Held:
    """The mutex's connection, used by the task holding the mutex for its reads and writes:
    they fail, rather than go on unprotected, if that connection (and so the lock) is lost."""

    conn: asyncpg.Connection | None
    task: asyncio.Task[Any] | None


_held: ContextVar[_Held | None] = ContextVar("postgres_mutex_held", default=None)


async def _lock_machines(conn: asyncpg.Connection, ids: Sequence[str]) -> None:
    """Lock the rows of machines about to be written, in the order of their ids. The
    heartbeat flush writes machines outside the mutex, beside commits: two transactions that
    lock the same rows in different orders deadlock, and PostgreSQL fails one of them only
    after deadlock_timeout (1 s; it held up a rollout step, issue 8)."""
    if ids:
        await conn.execute("SELECT FROM machines WHERE id = ANY($1::text[]) ORDER BY id "
                           "FOR UPDATE", ids)


class _Mutex:
    """One task of one replica at a time: a local lock first (so one connection per replica
    waits), then the advisory lock on a pooled connection kept for the holder's queries."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._local = asyncio.Lock()
        self._held: _Held | None = None
        self._token: Any = None

    async def __aenter__(self) -> None:
        await self._local.acquire()
        try:
            conn = await self._store._pool_or_fail().acquire()
            try:
                await self._store._guard(conn.execute("SELECT pg_advisory_lock($1)", MUTEX_LOCK))
            except BaseException:
                await self._store._pool_or_fail().release(conn)
                raise
        except BaseException:
            self._local.release()
            raise
        self._held = _Held(conn, asyncio.current_task())
        self._token = _held.set(self._held)

    async def __aexit__(self, *exc: object) -> None:
        held, self._held = self._held, None
        assert held is not None and held.conn is not None
        conn, held.conn, held.task = held.conn, None, None  # tasks started inside keep none
        _held.reset(self._token)
        try:
            with contextlib.suppress(*_DATABASE_ERRORS):
                await conn.execute("SELECT pg_advisory_unlock($1)", MUTEX_LOCK)
            await self._store._pool_or_fail().release(conn)
        finally:
            self._local.release()


class PostgresStore(Store):
    """Store on a PostgreSQL database given by a libpq-style DSN (postgresql://...); open()
    brings its schema up to date. Several coordinators may share the database."""

    def __init__(self, dsn: str, pool_size: int = 10) -> None:
        self.dsn = dsn
        self.name = describe(dsn)
        self.pool_size = pool_size
        self.identity = f"{socket.gethostname()} pid {os.getpid()}"  # shown as the leader
        self._pool: asyncpg.Pool | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- plumbing -----------------------------------------------------------------
    def _pool_or_fail(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(f"store {self.name} is not open")
        return self._pool

    async def _guard(self, work: Any) -> Any:
        """Await work; database errors become StoreError naming the database."""
        try:
            return await work
        except StoreError:
            raise
        except _DATABASE_ERRORS as exc:
            raise StoreError(f"{self.name}: {exc}") from exc

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """The mutex's connection for the task holding it, else one from the pool."""
        pool = self._pool_or_fail()
        held = _held.get()
        if held is not None and held.conn is not None and held.task is asyncio.current_task():
            yield held.conn
            return
        conn = await self._guard(pool.acquire())
        try:
            yield conn
        finally:
            await pool.release(conn)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A transaction that, for leader work, first checks the leader epoch is still the
        one the task was elected with (FOR SHARE: an election waits for this commit)."""
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    epoch = leader_epoch.get()
                    if epoch is not None:
                        now = await conn.fetchval("SELECT epoch FROM leader WHERE id = 1 FOR SHARE")
                        if now != epoch:
                            raise Fenced(f"{self.name}: this coordinator was deposed (leader epoch "
                                         f"{epoch}, now {now}): its write was refused")
                    yield conn
            except StoreError:
                raise
            except _DATABASE_ERRORS as exc:
                raise StoreError(f"{self.name}: {exc}") from exc

    async def _all(self, decode: Callable[[Row], T], sql: str, *params: Any) -> list[T]:
        async with self._connection() as conn:
            rows = await self._guard(conn.fetch(sql, *params))
        return [decode(row) for row in rows]

    async def _one(self, decode: Callable[[Row], T], sql: str, *params: Any) -> T | None:
        found = await self._all(decode, sql, *params)
        return found[0] if found else None

    async def _execute(self, sql: str, *params: Any) -> None:
        async with self._transaction() as conn:
            await conn.execute(sql, *params)

    async def _connect(self, **settings: str) -> asyncpg.Connection:
        """A connection of its own (not pooled): for the election and the listener."""
        return await asyncpg.connect(self.dsn, server_settings={
            "application_name": "nodeagent-coordinator", **settings})

    # -- lifecycle --------------------------------------------------------------
    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self.pool_size,
                server_settings={"application_name": "nodeagent-coordinator"})
        except (*_DATABASE_ERRORS, ValueError) as exc:  # ValueError: a malformed DSN
            raise StoreError(f"{self.name}: {exc}") from exc
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        """Apply missing migrations, one transaction each, under an advisory lock: replicas
        starting together never apply one twice."""
        latest = len(MIGRATIONS)
        while True:
            async with self._transaction() as conn:
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                await conn.execute("CREATE TABLE IF NOT EXISTS schema_version "
                                   "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
                current = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
                if current > latest:
                    raise StoreError(
                        f"database schema version {current} is newer than this coordinator "
                        f"supports ({latest}): run a coordinator at least as new as the one "
                        "that wrote it")
                if current == latest:
                    return
                await conn.execute(MIGRATIONS[current])
                await conn.execute("INSERT INTO schema_version VALUES ($1, $2)", current + 1,
                                   time.time())

    async def close(self) -> None:
        """Closing resigns: the election and listener connections go first."""
        for task in list(self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- clusters -------------------------------------------------------------
    async def put_cluster(self, spec: ClusterSpec, now: float) -> StoredCluster:
        text = spec_to_json(spec)
        async with self._transaction() as conn:
            row = await conn.fetchrow("INSERT INTO clusters (name, spec, generation, created_at, "
                                      "updated_at) VALUES ($1, $2, 1, $3, $3) "
                                      "ON CONFLICT (name) DO NOTHING RETURNING *",
                                      spec.name, text, now)
            if row is not None:
                return cluster_from_row(row)
            stored = cluster_from_row(await conn.fetchrow(
                "SELECT * FROM clusters WHERE name = $1 FOR UPDATE", spec.name))
            # Compare re-encoded: a spec stored by an older model version (missing a field that
            # now has a default) is not a change.
            if spec_to_json(stored.spec) == text:
                return stored
            await conn.execute("UPDATE clusters SET spec = $1, generation = generation + 1, "
                               "updated_at = $2 WHERE name = $3", text, now, spec.name)
            return replace(stored, spec=spec, generation=stored.generation + 1, updated_at=now)

    async def get_cluster(self, name: str) -> StoredCluster | None:
        return await self._one(cluster_from_row, "SELECT * FROM clusters WHERE name = $1", name)

    async def list_clusters(self) -> list[StoredCluster]:
        return await self._all(cluster_from_row, "SELECT * FROM clusters ORDER BY name")

    async def mark_cluster_deleting(self, name: str) -> None:
        await self._execute("UPDATE clusters SET deleting = TRUE WHERE name = $1", name)

    async def remove_cluster(self, name: str) -> None:
        async with self._transaction() as conn:
            machines = await conn.fetchval("SELECT COUNT(*) FROM machines WHERE cluster = $1", name)
            if machines:
                raise StoreError(f"cluster {name} still has {machines} machines: remove them first")
            await conn.execute("DELETE FROM join_tokens WHERE cluster = $1", name)
            await conn.execute("DELETE FROM clusters WHERE name = $1", name)

    # -- join tokens ------------------------------------------------------------
    async def add_join_token(self, cluster: str, token_hash: str, now: float,
                             expires_at: float | None, max_uses: int | None) -> JoinToken:
        token = JoinToken(id=token_id(token_hash), cluster=cluster, created_at=now,
                          expires_at=expires_at, max_uses=max_uses)
        await self._execute(
            "INSERT INTO join_tokens (id, hash, cluster, created_at, expires_at, max_uses) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            token.id, token_hash, cluster, now, expires_at, max_uses)
        return token

    async def list_join_tokens(self, cluster: str | None = None) -> list[JoinToken]:
        if cluster is None:
            return await self._all(join_token_from_row,
                                   "SELECT * FROM join_tokens ORDER BY created_at, seq")
        return await self._all(join_token_from_row, "SELECT * FROM join_tokens WHERE cluster = $1 "
                               "ORDER BY created_at, seq", cluster)

    async def revoke_join_token(self, token_id: str) -> JoinToken | None:
        async with self._transaction() as conn:
            row = await conn.fetchrow("UPDATE join_tokens SET revoked = TRUE WHERE id = $1 "
                                      "RETURNING *", token_id)
        return None if row is None else join_token_from_row(row)

    async def use_join_token(self, token_hash: str, now: float) -> tuple[JoinToken | None, bool]:
        """One UPDATE: its row lock makes concurrent uses (on any replica) wait their turn."""
        async with self._transaction() as conn:
            row = await conn.fetchrow(_USE_JOIN_TOKEN, token_hash, now)
            counted = row is not None
            if row is None:
                row = await conn.fetchrow("SELECT * FROM join_tokens WHERE hash = $1", token_hash)
        return (None if row is None else join_token_from_row(row)), counted

    # -- admin tokens -------------------------------------------------------------
    async def add_admin_token(self, token_hash: str, name: str, role: str,
                              now: float) -> AdminToken:
        token = AdminToken(id=token_id(token_hash), name=name, role=role, created_at=now)
        await self._execute("INSERT INTO admin_tokens (id, hash, name, role, created_at) "
                            "VALUES ($1, $2, $3, $4, $5)", token.id, token_hash, name, role, now)
        return token

    async def admin_token(self, token_hash: str) -> AdminToken | None:
        return await self._one(admin_token_from_row,
                               "SELECT * FROM admin_tokens WHERE hash = $1", token_hash)

    async def list_admin_tokens(self) -> list[AdminToken]:
        return await self._all(admin_token_from_row,
                               "SELECT * FROM admin_tokens ORDER BY created_at, seq")

    async def revoke_admin_token(self, token_id: str) -> AdminToken | None:
        async with self._transaction() as conn:
            row = await conn.fetchrow("UPDATE admin_tokens SET revoked = TRUE WHERE id = $1 "
                                      "RETURNING *", token_id)
        return None if row is None else admin_token_from_row(row)

    # -- machines ---------------------------------------------------------------
    async def get_machine(self, machine_id: str) -> Machine | None:
        return await self._one(machine_from_row,
                               "SELECT doc, last_seen FROM machines WHERE id = $1", machine_id)

    async def machine_generation(self, machine_id: str) -> int | None:
        return await self._one(lambda row: int(row[0]), "SELECT (doc::jsonb ->> 'generation')"
                               "::bigint FROM machines WHERE id = $1", machine_id)

    async def credential_owner(self, credential_hash: str) -> CredentialOwner | None:
        if not credential_hash:  # machines without a credential store "": never match them
            return None
        return await self._one(credential_owner_from_row, _CREDENTIAL_OWNER, credential_hash)

    async def count_machines(self) -> list[MachineCount]:
        return await self._all(machine_count_from_row, _COUNT_MACHINES)

    async def list_machines(self, cluster: str | None = None, role: Role | None = None) -> list[Machine]:
        """See Store.list_machines."""
        where, params = [], []
        if cluster is not None:
            params.append(cluster)
            where.append(f"cluster = ${len(params)}")
        if role is not None:
            params.append(role)
            where.append(f"{_ROLE} = ${len(params)}")
        query = "SELECT doc, last_seen FROM machines"
        if where:
            query += " WHERE " + " AND ".join(where)
        return await self._all(machine_from_row, query + " ORDER BY cluster, hostname, id",
                               *params)

    async def get_machines(self, machine_ids: Collection[str]) -> list[Machine]:
        return await self._all(machine_from_row, "SELECT doc, last_seen FROM machines "
                               "WHERE id = ANY($1::text[])", list(machine_ids))

    async def machines_by_hostname(self, hostname: str, cluster: str | None = None) -> list[Machine]:
        if cluster is None:
            return await self._all(machine_from_row, "SELECT doc, last_seen FROM machines "
                                   "WHERE hostname = $1 ORDER BY cluster", hostname)
        return await self._all(machine_from_row, "SELECT doc, last_seen FROM machines "
                               "WHERE cluster = $1 AND hostname = $2", cluster, hostname)

    async def machines_last_seen_between(self, cluster: str, start: float, end: float) -> list[str]:
        return await self._all(lambda row: str(row["id"]),
                               "SELECT id FROM machines WHERE cluster = $1 AND last_seen >= $2 "
                               "AND last_seen < $3", cluster, start, end)

    async def touch_machines(self, seen: Mapping[str, float]) -> None:
        if not seen:
            return
        async with self._transaction() as conn:
            await _lock_machines(conn, list(seen))
            await conn.execute(
                "UPDATE machines SET last_seen = GREATEST(machines.last_seen, seen.at) "
                "FROM unnest($1::text[], $2::double precision[]) AS seen (id, at) "
                "WHERE machines.id = seen.id", list(seen), list(seen.values()))

    # -- atomic writes ----------------------------------------------------------
    async def commit(
        self,
        machines: Sequence[Machine] = (),
        events: Sequence[Event] = (),
        removed: Sequence[str] = (),
    ) -> list[Event]:
        # Encoded before the transaction: a value JSON cannot hold fails with nothing written.
        rows = [machine_to_row(m) for m in machines]
        data = [dumps(e.data) for e in events]
        if not (rows or events or removed):
            return []
        async with self._transaction() as conn:
            await _lock_machines(conn, [*(m.id for m in machines), *removed])
            if rows:
                await conn.executemany(_UPSERT_MACHINE, rows)
            if removed:
                await conn.execute("DELETE FROM machines WHERE id = ANY($1::text[])", list(removed))
            if not events:
                return []
            last = await conn.fetchval("UPDATE event_ids SET last = last + $1 RETURNING last",
                                       len(events))
            stored = [replace(e, id=last - len(events) + 1 + i) for i, e in enumerate(events)]
            await conn.executemany(_INSERT_EVENT, [
                (e.id, e.time, e.cluster, e.machine, e.hostname, e.kind, e.message, text)
                for e, text in zip(stored, data, strict=True)])
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
        params: list[Any] = [since_id]
        where = ["id > $1"]

        def add(condition: str, value: Any) -> None:
            params.append(value)
            where.append(condition.format(f"${len(params)}"))

        if cluster is not None:
            add("cluster = {}", cluster)
        if machine is not None:
            add("machine = {}", machine)
        if since_time is not None:
            add("time >= {}", since_time)
        if kinds is not None:
            add("kind = ANY({}::text[])", list(kinds))
        params.append(limit)
        order = "DESC" if newest_first else "ASC"
        return await self._all(event_from_row, f"SELECT * FROM events WHERE {' AND '.join(where)} "
                               f"ORDER BY id {order} LIMIT ${len(params)}", *params)

    # -- replicas -------------------------------------------------------------------
    def mutex(self) -> _Mutex:
        return _Mutex(self)

    async def campaign(self) -> Term:
        """Try the leader lock every RETRY_SECONDS on a connection of its own; once it is ours,
        bump the epoch (fencing every earlier leader) and watch the connection: when it goes,
        so does the lock, and the term is over at once."""
        self._pool_or_fail()
        conn: asyncpg.Connection | None = None
        try:
            while True:
                try:
                    if conn is None or conn.is_closed():
                        conn = await self._connect(**KEEPALIVES)
                    if await conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK):
                        epoch = await conn.fetchval(
                            "UPDATE leader SET epoch = epoch + 1, holder = $1, since = $2 "
                            "WHERE id = 1 RETURNING epoch", self.identity, time.time())
                        term = Term(epoch)
                        self._spawn(self._hold(conn, term), "leader lock")
                        conn = None  # _hold owns it now
                        return term
                except _DATABASE_ERRORS as exc:
                    log.warning("leader election on %s failed: %s; retrying", self.name, exc)
                    if conn is not None:
                        conn.terminate()
                        conn = None
                await asyncio.sleep(RETRY_SECONDS)
        finally:
            if conn is not None:
                conn.terminate()

    async def _hold(self, conn: asyncpg.Connection, term: Term) -> None:
        conn.add_termination_listener(lambda _: term.lost.set())
        try:
            while not term.lost.is_set():
                try:
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), PROBE_SECONDS * 2)
                except _DATABASE_ERRORS as exc:
                    log.error("lost the leader lock's connection to %s: %s", self.name, exc)
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(term.lost.wait(), PROBE_SECONDS)
        finally:
            term.lost.set()
            conn.terminate()

    async def listen(self, deliver: Callable[[str], None]) -> bool:
        self._pool_or_fail()
        connected = asyncio.Event()
        self._spawn(self._listen(deliver, connected), "listener")
        await connected.wait()
        return True

    async def _listen(self, deliver: Callable[[str], None], connected: asyncio.Event) -> None:
        """LISTEN on a connection of its own; reconnect when it goes, telling deliver that
        messages may have been missed meanwhile."""
        while True:
            lost = asyncio.Event()
            try:
                conn = await self._connect()
            except _DATABASE_ERRORS as exc:
                log.warning("cannot listen on %s: %s; retrying", self.name, exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                conn.add_termination_listener(lambda _, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, lambda _c, _pid, _ch, payload: deliver(payload))
                if connected.is_set():
                    deliver("")
                connected.set()
                await lost.wait()
            except _DATABASE_ERRORS as exc:
                log.warning("listening on %s failed: %s; reconnecting", self.name, exc)
            finally:
                conn.terminate()
            await asyncio.sleep(RETRY_SECONDS)

    async def publish(self, message: str) -> None:
        async with self._connection() as conn:
            await self._guard(conn.execute("SELECT pg_notify($1, $2)", CHANNEL, message))
