"""The embedded default store: one SQLite file, driven from two dedicated threads.

sqlite3 calls block, so they run on worker threads: the event loop never waits on disk.
Writes go through one connection on one thread, so they are serialized without any locking
of our own; reads go through a second connection on a second thread, so that an agent's
heartbeat or long-poll never queues behind a commit's fsync. WAL lets readers (that
connection, backups, a CLI) read while the coordinator writes, and a read sees every commit
that returned before it started; synchronous=FULL makes every returned commit survive a
power cut.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from coordinator.domain.assignments.etags import Version, new_epoch
from coordinator.domain.changes import Change
from coordinator.domain.machines.clones import Holder
from coordinator.domain.machines.tokens import token_id
from coordinator.domain.model import POOL, ClusterSpec, Machine, Role
from coordinator.domain.records import (
    AdminToken,
    CredentialOwner,
    EtcdSnapshot,
    Event,
    JoinToken,
    MachineCount,
    RemovedMachine,
    StoredCluster,
)
from coordinator.domain.releases.clusterapply import respecified
from coordinator.domain.views.machinelist import MachineQuery
from coordinator.store.base import Store, StoreError, Tables, TokenRefused
from coordinator.store.cipher import Cipher
from coordinator.store.codec import (
    admin_token_from_row,
    cluster_from_row,
    cluster_row,
    credential_owner_from_row,
    dumps,
    etcd_snapshot_from_row,
    etcd_snapshot_row,
    event_from_row,
    identity_rows,
    join_token_from_row,
    label_rows,
    machine_count_from_row,
    machine_from_row,
    machine_to_row,
    opened_etcd_chunk,
    output_rows,
    removed_machine_from_row,
    sealed_etcd_chunk,
    spec_to_json,
    version_from_row,
    with_outputs,
)
from coordinator.store.sql import (
    SQLITE,
    TABLES,
    Statements,
    check_importable,
    check_removable,
    prune_through,
)
from coordinator.store.sqlite_schema import (
    IDENTITIES_FROM_DOCS,
    LISTED_FROM_DOCS,
    MIGRATIONS,
    migrate,
    split_statements,
    transaction,
)

T = TypeVar("T")
SQL = Statements(SQLITE)  # the statements the stores share, as SQLite spells them

BUSY_TIMEOUT_SECONDS = 10.0
LOOKUP_BUSY_TIMEOUT_SECONDS = 1.0  # on the event loop's thread: see SQLiteStore._one

_IN_CHUNK = 500  # ids per `IN (...)`: far below SQLite's limit on bound parameters


def _read_only(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection that only reads (WAL: it never waits for the writer)."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA query_only = ON")
    return conn


class SQLiteStore(Store):
    """Store on one SQLite file; open() creates the file and brings its schema up to date.
    Machines' secrets are sealed with cipher (None: a store that holds none, e.g. a tool's)."""

    kind = "sqlite"

    def __init__(self, path: str | Path, cipher: Cipher | None = None) -> None:
        self.path = Path(path)
        self.cipher = cipher
        self._machine = partial(machine_from_row, cipher=cipher)  # decodes a machine's row
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
        long-poll's generation: at 10,000 agents those hops set the p99)."""
        rows = self._lookup(sql, params)
        return decode(rows[0]) if rows else None

    def _lookup(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        """The rows of an indexed lookup, on the event loop's own thread (_one)."""
        if self._lookup_conn is None:
            raise StoreError(f"store {self.path} is not open")
        try:
            return self._lookup_conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

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
        try:  # made 0600 whatever the umask: SQLite gives its -wal and -shm the file's mode
            os.close(os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create it: {exc.strerror}") from None
        # isolation_level=None: no implicit transactions, transaction() says where they are.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode != "wal":
                raise StoreError(f"{self.path}: cannot use WAL journaling (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate(conn, MIGRATIONS)
            if self.cipher is not None:
                with transaction(conn):
                    conn.execute(SQL.claim_secrets_key, (self.cipher.fingerprint,))
                    (fingerprint,) = conn.execute(SQL.secrets_key).fetchone()
                self.cipher.verify(fingerprint)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _connect_reader(self) -> None:
        self._reader_conn = _read_only(self.path, BUSY_TIMEOUT_SECONDS)

    async def pragma(self, name: str) -> Any:
        """A PRAGMA's value on the store's writing connection: durability (synchronous) and
        integrity (foreign_keys) are set per connection, so only the store can tell them."""
        if not name.isidentifier():
            raise ValueError(f"not a PRAGMA name: {name!r}")
        return await self._run(lambda: self._db.execute(f"PRAGMA {name}").fetchone()[0])

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
        conn = self._db
        with transaction(conn):
            row = conn.execute(SQL.cluster, (spec.name,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO clusters (name, spec, generation, created_at, updated_at) "
                             "VALUES (?, ?, 1, ?, ?)", (spec.name, spec_to_json(spec), now, now))
                return StoredCluster(spec=spec, generation=1, created_at=now, updated_at=now)
            stored = cluster_from_row(row)
            updated = respecified(stored, spec, now)
            if updated is None:
                return stored
            conn.execute(SQL.respecify_cluster, (spec_to_json(spec), now, spec.name))
            return updated

    async def get_cluster(self, name: str) -> StoredCluster | None:
        found = await self._one(cluster_from_row, SQL.cluster, (name,))
        if found is None:
            return None
        return with_outputs(found, self._lookup(SQL.cluster_outputs, (name,)), self.cipher)

    async def list_clusters(self) -> list[StoredCluster]:
        clusters = await self._all(cluster_from_row, SQL.clusters)
        rows = await self._all(lambda row: row, SQL.all_outputs) if clusters else []
        return [with_outputs(c, [r for r in rows if r["cluster"] == c.spec.name], self.cipher)
                for c in clusters]

    # -- join tokens ------------------------------------------------------------
    async def add_join_token(self, cluster: str, token_hash: str, now: float,
                             expires_at: float | None, max_uses: int | None,
                             auto_approve: bool = False) -> JoinToken:
        token = JoinToken(id=token_id(token_hash), cluster=cluster, created_at=now,
                          expires_at=expires_at, max_uses=max_uses, auto_approve=auto_approve)
        await self._execute(SQL.insert_join_token,
                            (token.id, token_hash, cluster or None, now, expires_at, max_uses,
                             auto_approve))
        return token

    async def list_join_tokens(self, cluster: str | None = None) -> list[JoinToken]:
        if cluster is None:
            return await self._all(join_token_from_row, SQL.join_tokens)
        if cluster == POOL:
            return await self._all(join_token_from_row, SQL.pool_join_tokens)
        return await self._all(join_token_from_row, SQL.cluster_join_tokens, (cluster,))

    async def join_token(self, token_hash: str) -> JoinToken | None:
        return await self._one(join_token_from_row, SQL.join_token, (token_hash,))

    async def revoke_join_token(self, token_id: str) -> JoinToken | None:
        await self._execute(SQL.revoke_join_token, (token_id,))
        return await self._one(join_token_from_row, SQL.join_token_by_id, (token_id,))

    # -- admin tokens -------------------------------------------------------------
    async def add_admin_token(self, token_hash: str, name: str, role: str,
                              now: float) -> AdminToken:
        token = AdminToken(id=token_id(token_hash), name=name, role=role, created_at=now)
        await self._execute(SQL.insert_admin_token, (token.id, token_hash, name, role, now))
        return token

    async def admin_token(self, token_hash: str) -> AdminToken | None:
        return await self._one(admin_token_from_row, SQL.admin_token, (token_hash,))

    async def list_admin_tokens(self) -> list[AdminToken]:
        return await self._all(admin_token_from_row, SQL.admin_tokens)

    async def revoke_admin_token(self, token_id: str) -> AdminToken | None:
        await self._execute(SQL.revoke_admin_token, (token_id,))
        return await self._one(admin_token_from_row, SQL.admin_token_by_id, (token_id,))

    # -- machines ---------------------------------------------------------------
    async def get_machine(self, machine_id: str) -> Machine | None:
        return await self._one(self._machine, SQL.machine, (machine_id,))

    async def machine_version(self, machine_id: str) -> Version | None:
        return await self._one(version_from_row, SQL.machine_version, (machine_id,))

    async def credential_owner(self, credential_hash: str) -> CredentialOwner | None:
        if not credential_hash:  # machines without a credential store "": never match them
            return None
        return await self._one(credential_owner_from_row, SQL.credential_owner, (credential_hash,))

    async def list_machines(self, cluster: str | None = None, role: Role | None = None) -> list[Machine]:
        return await self._all(self._machine, *SQL.machines(cluster, role))

    async def move_target(self) -> str | None:
        return await self._one(lambda row: str(row[0]), SQL.move_target, ())

    def _retarget(self, doc: str | None) -> None:
        if doc is None:
            self._db.execute(SQL.clear_move_target)
        else:
            self._db.execute(SQL.put_move_target, (doc,))

    async def removed_machine(self, machine_id: str) -> RemovedMachine | None:
        return await self._one(removed_machine_from_row, SQL.removed_machine, (machine_id,))

    async def removed_by_hostname(self, hostname: str,
                                  cluster: str | None = None) -> list[RemovedMachine]:
        if cluster is None:
            return await self._all(removed_machine_from_row, SQL.removed_named, (hostname,))
        return await self._all(removed_machine_from_row, SQL.cluster_removed_named,
                               (cluster, hostname))

    async def removed_credential(self, credential_hash: str) -> RemovedMachine | None:
        if not credential_hash:
            return None
        return await self._one(removed_machine_from_row, SQL.removed_credential, (credential_hash,))

    async def machine_page(self, query: MachineQuery) -> tuple[list[str], int]:
        return await self._run(self._machine_page, query, executor=self._reader_executor)

    def _machine_page(self, query: MachineQuery) -> tuple[list[str], int]:
        """Both statements in one read transaction: the count is of the page's state."""
        statements, reader = SQL.machine_page(query), self._reader
        reader.execute("BEGIN")
        try:
            ids = [row[0] for row in reader.execute(statements.page, statements.params)]
            (total,) = reader.execute(statements.count, statements.count_params).fetchone()
        finally:
            reader.execute("COMMIT")
        return ids, total

    async def count_machines(self) -> list[MachineCount]:
        return await self._all(machine_count_from_row, SQL.count_machines)

    async def get_machines(self, machine_ids: Collection[str]) -> list[Machine]:
        ids = list(machine_ids)
        found: list[Machine] = []
        for start in range(0, len(ids), _IN_CHUNK):
            found += await self._all(self._machine,
                                     *SQL.machines_with_ids(ids[start:start + _IN_CHUNK]))
        return found

    # A registration's look-ups (a hostname's machines, an identity's holders: a few rows
    # through an index) are read on the event loop's thread, as _one reads: each hop to
    # another thread waits for the GIL behind a busy event loop while the registration holds
    # the write lock, and every registration queues behind that lock.
    async def machines_by_hostname(self, hostname: str, cluster: str | None = None) -> list[Machine]:
        rows = self._lookup(SQL.machines_named, (hostname,)) if cluster is None else \
            self._lookup(SQL.cluster_machines_named, (cluster, hostname))
        return [self._machine(row) for row in rows]

    async def identity_holders(self, values: Collection[tuple[str, str]],
                               excluding: str) -> list[Holder]:
        return [Holder(*row) for kind, value in sorted(values)
                for row in self._lookup(SQL.identity_holders, (kind, value, excluding))]

    async def machines_last_seen_between(self, cluster: str, start: float, end: float) -> list[str]:
        return await self._all(lambda row: str(row["id"]), SQL.last_seen_between,
                               (cluster, start, end))

    async def touch_machines(self, seen: Mapping[str, float]) -> None:
        await self._run(self._touch_machines, list(seen.items()))

    def _touch_machines(self, seen: list[tuple[str, float]]) -> None:
        conn = self._db
        with transaction(conn):
            conn.executemany("UPDATE machines SET last_seen = MAX(last_seen, ?) WHERE id = ?",
                             [(when, machine_id) for machine_id, when in seen])

    # -- atomic writes ----------------------------------------------------------
    async def apply(self, change: Change) -> list[Event]:
        return await self._run(self._apply, change)

    def _apply(self, change: Change) -> list[Event]:
        # Encoded (on the writer's thread) before the transaction: a value that cannot be
        # stored fails with nothing written.
        clusters = [cluster_row(c) for c in change.clusters]
        kept = output_rows(change.outputs, self.cipher)
        rows = [machine_to_row(m, self.cipher) for m in change.machines]
        conn = self._db
        stored: list[Event] = []
        removed = list(change.removed.items())
        with transaction(conn):
            use = change.token_use
            if use is not None and conn.execute(SQL.use_join_token,
                                                (use.hash, use.at)).rowcount != 1:
                raise TokenRefused("join token not usable")
            conn.executemany(SQL.write_cluster, clusters)
            if change.retarget is not None:
                self._retarget(change.retarget.doc)
            conn.executemany(SQL.keep_output, kept)
            for row in rows:
                conn.execute(SQL.upsert_machine, row)
            gone = [(m.id,) for m in change.machines] + [(i,) for i, _ in removed]
            conn.executemany("DELETE FROM machine_labels WHERE machine_id = ?", gone)
            conn.executemany(SQL.insert_label, label_rows(change.machines))
            conn.executemany("DELETE FROM machine_identities WHERE machine_id = ?", gone)
            conn.executemany(SQL.insert_identity, identity_rows(change.machines))
            conn.executemany(SQL.keep_removed, removed)
            conn.executemany("DELETE FROM machines WHERE id = ?", [(i,) for i, _ in removed])
            for name in change.dropped:
                (machines,) = conn.execute(SQL.count_cluster_machines, (name,)).fetchone()
                check_removable(name, machines)
                for statement in SQL.drop_cluster:
                    conn.execute(statement, (name,))
            for e in change.events:
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
        return await self._all(event_from_row, *SQL.events(cluster, machine, since_id, since_time,
                                                           limit, kinds, newest_first))

    async def prune_events(self, before: float, keep: int, chunk: int) -> int:
        return await self._run(self._prune_events, before, keep, chunk)

    def _prune_events(self, before: float, keep: int, chunk: int) -> int:
        conn = self._db
        with transaction(conn):
            through = prune_through(*conn.execute(SQL.retention_bounds, (keep, before)).fetchone(),
                                    chunk=chunk)
            if through is None:
                return 0
            return conn.execute(SQL.delete_events_through, (through,)).rowcount

    # -- etcd snapshots -------------------------------------------------------------
    async def begin_etcd_snapshot(self, snapshot: EtcdSnapshot) -> None:
        await self._execute(SQL.begin_etcd_snapshot, etcd_snapshot_row(snapshot))

    async def add_etcd_snapshot_chunk(self, snapshot_id: str, seq: int, data: bytes) -> None:
        sealed = sealed_etcd_chunk(self.cipher, snapshot_id, seq, data)
        await self._execute(SQL.add_etcd_snapshot_chunk, (snapshot_id, seq, sealed))

    async def complete_etcd_snapshot(self, snapshot_id: str, size: int, sha256: str) -> None:
        await self._execute(SQL.complete_etcd_snapshot, (size, sha256, snapshot_id))

    async def etcd_snapshots(self, cluster: str) -> list[EtcdSnapshot]:
        return await self._all(etcd_snapshot_from_row, SQL.etcd_snapshots, (cluster,))

    async def etcd_snapshot(self, snapshot_id: str) -> EtcdSnapshot | None:
        return await self._one(etcd_snapshot_from_row, SQL.etcd_snapshot, (snapshot_id,))

    async def etcd_snapshot_chunk(self, snapshot_id: str, seq: int) -> bytes | None:
        """Read and unsealed on the reader's thread: a MiB each, not on the event loop."""
        rows = await self._all(lambda row: str(row[0]), SQL.etcd_snapshot_chunk,
                               (snapshot_id, seq))
        return opened_etcd_chunk(self.cipher, snapshot_id, seq, rows[0]) if rows else None

    async def incomplete_etcd_snapshots(self, before: float) -> list[str]:
        return await self._all(lambda row: str(row[0]), SQL.incomplete_etcd_snapshots, (before,))

    async def drop_etcd_snapshot(self, snapshot_id: str) -> None:
        await self._run(self._drop_etcd_snapshot, snapshot_id)

    def _drop_etcd_snapshot(self, snapshot_id: str) -> None:
        with transaction(self._db):
            for statement in SQL.drop_etcd_snapshot:
                self._db.execute(statement, (snapshot_id,))

    # -- snapshots ----------------------------------------------------------------
    async def export(self) -> dict[str, list[dict[str, Any]]]:
        """On a connection and thread of its own, so that neither the writer nor the readers
        wait for it: WAL lets its one read transaction see a single commit's state however
        long it reads."""
        return await asyncio.to_thread(self._guarded, self._export)

    def _export(self) -> dict[str, list[dict[str, Any]]]:
        conn = _read_only(self.path, BUSY_TIMEOUT_SECONDS)
        try:
            conn.execute("BEGIN")
            tables = {table.name: [table.portable(row)
                                   for row in conn.execute(SQL.export[table.name])]
                      for table in TABLES}
            conn.execute("COMMIT")
            return tables
        finally:
            conn.close()

    async def occupied(self) -> list[str]:
        return await self._all(lambda row: str(row[0]), SQL.occupied)

    async def import_(self, tables: Tables, beside: Collection[str] = ()) -> None:
        await self._run(self._import, tables, beside)

    def _import(self, tables: Tables, beside: Collection[str]) -> None:
        conn = self._db
        with transaction(conn):
            check_importable(tables, beside, [row[0] for row in conn.execute(SQL.occupied)])
            for table in TABLES:
                conn.executemany(SQL.import_[table.name],
                                 [table.values(row) for row in tables.get(table.name, ())])
            for statement in split_statements(LISTED_FROM_DOCS + IDENTITIES_FROM_DOCS):
                conn.execute(statement)
            conn.execute(SQL.mint_epoch, (new_epoch(),))
