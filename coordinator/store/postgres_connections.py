"""The coordinator's connections to one PostgreSQL database: the pool the store's queries take
theirs from, transactions that refuse a deposed leader's writes, the mutex (an advisory lock
whose connection serves its holder's own queries), and connections of their own for what
outlives a query (the election, the listener)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg

from coordinator.store.base import Fenced, StoreError, leader_epoch
from coordinator.store.codec import Row

T = TypeVar("T")

# Advisory lock keys (one 64-bit space per database): arbitrary, but fixed forever.
LEADER_LOCK = 0x6E61_0001
MUTEX_LOCK = 0x6E61_0002
MIGRATION_LOCK = 0x6E61_0003
APPLICATION_NAME = "nodeagent-coordinator"
CLOSE_SECONDS = 10.0  # how long closing waits for connections in use before it ends them

# What the driver raises when the database refuses or cannot be reached.
DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


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


class Database:
    """One PostgreSQL database given by a libpq-style DSN (postgresql://...), and the
    background tasks that hold connections of their own to it."""

    def __init__(self, dsn: str, pool_size: int) -> None:
        self.dsn = dsn
        self.name = describe(dsn)
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._background: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self.pool_size,
                server_settings={"application_name": APPLICATION_NAME})
        except (*DATABASE_ERRORS, ValueError) as exc:  # ValueError: a malformed DSN
            raise StoreError(f"{self.name}: {exc}") from exc

    async def close(self) -> None:
        """The background tasks go first: closing resigns the election and stops listening.
        Each step is bounded (CLOSE_SECONDS): a connection still acquired (a query stuck on a
        lost server, a caller that never returns it) would keep the pool's graceful close, and
        the coordinator's shutdown, waiting for ever; past the bound the rest is terminated."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), CLOSE_SECONDS)
            except TimeoutError:
                pool.terminate()

    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(f"store {self.name} is not open")
        return self._pool

    async def guard(self, work: Any) -> Any:
        """Await work; database errors become StoreError naming the database."""
        try:
            return await work
        except StoreError:
            raise
        except DATABASE_ERRORS as exc:
            raise StoreError(f"{self.name}: {exc}") from exc

    async def connect(self, **settings: str) -> asyncpg.Connection:
        """A connection of its own (not pooled): for the election and the listener."""
        return await asyncpg.connect(self.dsn, server_settings={
            "application_name": APPLICATION_NAME, **settings})

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run work until it ends or the database is closed."""
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """The mutex's connection for the task holding it, else one from the pool."""
        pool = self.pool()
        held = _held.get()
        if held is not None and held.conn is not None and held.task is asyncio.current_task():
            yield held.conn
            return
        conn = await self.guard(pool.acquire())
        try:
            yield conn
        finally:
            await pool.release(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A transaction that, for leader work, first checks the leader epoch is still the
        one the task was elected with (FOR SHARE: an election waits for this commit)."""
        async with self.connection() as conn:
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
            except DATABASE_ERRORS as exc:
                raise StoreError(f"{self.name}: {exc}") from exc

    async def all(self, decode: Callable[[Row], T], sql: str, *params: Any) -> list[T]:
        async with self.connection() as conn:
            rows = await self.guard(conn.fetch(sql, *params))
        return [decode(row) for row in rows]

    async def one(self, decode: Callable[[Row], T], sql: str, *params: Any) -> T | None:
        found = await self.all(decode, sql, *params)
        return found[0] if found else None

    async def execute(self, sql: str, *params: Any) -> None:
        async with self.transaction() as conn:
            await conn.execute(sql, *params)


class Mutex:
    """One task of one replica at a time: a local lock first (so one connection per replica
    waits), then the advisory lock on a pooled connection kept for the holder's queries."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._local = asyncio.Lock()
        self._held: _Held | None = None
        self._source: asyncpg.Pool | None = None  # where the held connection goes back
        self._token: Any = None

    async def __aenter__(self) -> None:
        await self._local.acquire()
        try:
            pool = self._db.pool()
            conn = await pool.acquire()
            try:
                await self._db.guard(conn.execute("SELECT pg_advisory_lock($1)", MUTEX_LOCK))
            except BaseException:
                await pool.release(conn)
                raise
        except BaseException:
            self._local.release()
            raise
        self._source = pool
        self._held = _Held(conn, asyncio.current_task())
        self._token = _held.set(self._held)

    async def __aexit__(self, *exc: object) -> None:
        held, self._held = self._held, None
        assert held is not None and held.conn is not None
        conn, held.conn, held.task = held.conn, None, None  # tasks started inside keep none
        _held.reset(self._token)
        try:
            with contextlib.suppress(*DATABASE_ERRORS):
                await conn.execute("SELECT pg_advisory_unlock($1)", MUTEX_LOCK)
            # to the pool it came from: the store closing meanwhile has let go of its pool
            # (Database.close), and a connection never given back keeps that close waiting
            pool, self._source = self._source, None
            assert pool is not None
            await pool.release(conn)
        finally:
            self._local.release()
