"""What the coordinator replicas sharing one PostgreSQL database need from each other: the
leader election (a session advisory lock held on a connection of its own), the leader epoch
that fences a deposed leader's writes, and wake-ups of long-polling agents (LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import asyncpg

from coordinator.store.base import Term
from coordinator.store.postgres_connections import DATABASE_ERRORS, LEADER_LOCK, Database

log = logging.getLogger("coordinator.store")

CHANNEL = "nodeagent_coordinator"
RETRY_SECONDS = 1.0  # between election attempts, and reconnections of the listener
PROBE_SECONDS = 1.0  # the leader checks its lock connection this often
# A leader cut off from the database (not closed: silent) loses its lock when the server
# notices: keepalives make that seconds, not the kernel's two hours.
KEEPALIVES = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2",
              "tcp_keepalives_count": "2"}


async def campaign(db: Database, identity: str) -> Term:
    """Try the leader lock every RETRY_SECONDS on a connection of its own; once it is ours,
    bump the epoch (fencing every earlier leader) and watch the connection: when it goes,
    so does the lock, and the term is over at once. identity names the leader to operators."""
    db.pool()
    conn: asyncpg.Connection | None = None
    try:
        while True:
            try:
                if conn is None or conn.is_closed():
                    conn = await db.connect(**KEEPALIVES)
                if await conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK):
                    epoch = await conn.fetchval(
                        "UPDATE leader SET epoch = epoch + 1, holder = $1, since = $2 "
                        "WHERE id = 1 RETURNING epoch", identity, time.time())
                    term = Term(epoch)
                    db.spawn(_hold(db, conn, term), "leader lock")
                    conn = None  # _hold owns it now
                    return term
            except DATABASE_ERRORS as exc:
                log.warning("leader election on %s failed: %s; retrying", db.name, exc)
                if conn is not None:
                    conn.terminate()
                    conn = None
            await asyncio.sleep(RETRY_SECONDS)
    finally:
        if conn is not None:
            conn.terminate()


async def _hold(db: Database, conn: asyncpg.Connection, term: Term) -> None:
    conn.add_termination_listener(lambda _: term.lost.set())
    try:
        while not term.lost.is_set():
            try:
                await asyncio.wait_for(conn.fetchval("SELECT 1"), PROBE_SECONDS * 2)
            except DATABASE_ERRORS as exc:
                log.error("lost the leader lock's connection to %s: %s", db.name, exc)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(term.lost.wait(), PROBE_SECONDS)
    finally:
        term.lost.set()
        conn.terminate()


async def listen(db: Database, deliver: Callable[[str], None]) -> None:
    """Deliver what the other replicas publish, from once this returns until db closes."""
    db.pool()
    connected = asyncio.Event()
    db.spawn(_listen(db, deliver, connected), "listener")
    await connected.wait()


async def _listen(db: Database, deliver: Callable[[str], None], connected: asyncio.Event) -> None:
    """LISTEN on a connection of its own; reconnect when it goes, telling deliver that
    messages may have been missed meanwhile."""
    while True:
        lost = asyncio.Event()
        try:
            conn = await db.connect()
        except DATABASE_ERRORS as exc:
            log.warning("cannot listen on %s: %s; retrying", db.name, exc)
            await asyncio.sleep(RETRY_SECONDS)
            continue
        try:
            conn.add_termination_listener(lambda _, lost=lost: lost.set())
            await conn.add_listener(CHANNEL, lambda _c, _pid, _ch, payload: deliver(payload))
            if connected.is_set():
                deliver("")
            connected.set()
            await lost.wait()
        except DATABASE_ERRORS as exc:
            log.warning("listening on %s failed: %s; reconnecting", db.name, exc)
        finally:
            conn.terminate()
        await asyncio.sleep(RETRY_SECONDS)


async def publish(db: Database, message: str) -> None:
    async with db.connection() as conn:
        await db.guard(conn.execute("SELECT pg_notify($1, $2)", CHANNEL, message))
