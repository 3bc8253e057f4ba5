"""The store for several coordinator replicas: one PostgreSQL database, through asyncpg.

Besides the state, the database carries what the replicas need from each other (leader
election, fencing, the mutex, wake-ups): see postgres_connections.py and postgres_replicas.py.
Rows decode with the codec the SQLite store uses.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import asyncpg

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
from coordinator.store import postgres_replicas
from coordinator.store.base import Store, Tables, Term, TokenRefused
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
from coordinator.store.postgres_connections import Database, Mutex
from coordinator.store.postgres_schema import (
    IDENTITIES_FROM_DOCS,
    LISTED_FROM_DOCS,
    MIGRATIONS,
    migrate,
)
from coordinator.store.sql import (
    POSTGRES,
    TABLES,
    Statements,
    check_importable,
    check_removable,
    prune_through,
)

SQL = Statements(POSTGRES)  # the statements the stores share, as PostgreSQL spells them
_INSERT_EVENT = """
    INSERT INTO events (id, time, cluster, machine, hostname, kind, message, data)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""


async def _lock_machines(conn: asyncpg.Connection, ids: Sequence[str]) -> None:
    """Lock the rows of machines about to be written, in the order of their ids. The
    heartbeat flush writes machines outside the mutex, beside commits: two transactions that
    lock the same rows in different orders deadlock, and PostgreSQL fails one of them only
    after deadlock_timeout (1 s, enough to hold up a rollout step)."""
    if ids:
        await conn.execute("SELECT FROM machines WHERE id = ANY($1::text[]) ORDER BY id "
                           "FOR UPDATE", ids)


async def _retarget(conn: asyncpg.Connection, doc: str | None) -> None:
    if doc is None:
        await conn.execute(SQL.clear_move_target)
    else:
        await conn.execute(SQL.put_move_target, doc)


class PostgresStore(Store):
    """Store on a PostgreSQL database given by a libpq-style DSN (postgresql://...); open()
    brings its schema up to date. Several coordinators may share the database, and must share
    the key of cipher, which seals machines' secrets (None: a store that holds none)."""

    kind = "postgresql"

    def __init__(self, dsn: str, pool_size: int = 10, cipher: Cipher | None = None) -> None:
        self.db = Database(dsn, pool_size)
        self.cipher = cipher
        self._machine = partial(machine_from_row, cipher=cipher)  # decodes a machine's row
        self.identity = f"{socket.gethostname()} pid {os.getpid()}"  # shown as the leader

    # -- lifecycle --------------------------------------------------------------
    async def open(self) -> None:
        await self.db.open()
        try:
            await migrate(self.db, MIGRATIONS)
            if self.cipher is not None:
                await self.db.execute(SQL.claim_secrets_key, self.cipher.fingerprint)
                (fingerprint,) = await self.db.all(lambda row: str(row[0]), SQL.secrets_key)
                self.cipher.verify(fingerprint)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Closing resigns: the election and listener connections go first."""
        await self.db.close()

    # -- clusters -------------------------------------------------------------
    async def put_cluster(self, spec: ClusterSpec, now: float) -> StoredCluster:
        text = spec_to_json(spec)
        async with self.db.transaction() as conn:
            row = await conn.fetchrow("INSERT INTO clusters (name, spec, generation, created_at, "
                                      "updated_at) VALUES ($1, $2, 1, $3, $3) "
                                      "ON CONFLICT (name) DO NOTHING RETURNING *",
                                      spec.name, text, now)
            if row is not None:
                return cluster_from_row(row)
            stored = cluster_from_row(await conn.fetchrow(SQL.cluster + " FOR UPDATE", spec.name))
            updated = respecified(stored, spec, now)
            if updated is None:
                return stored
            await conn.execute(SQL.respecify_cluster, text, now, spec.name)
            return updated

    async def get_cluster(self, name: str) -> StoredCluster | None:
        found = await self.db.one(cluster_from_row, SQL.cluster, name)
        if found is None:
            return None
        rows = await self.db.all(lambda row: row, SQL.cluster_outputs, name)
        return with_outputs(found, rows, self.cipher)

    async def list_clusters(self) -> list[StoredCluster]:
        clusters = await self.db.all(cluster_from_row, SQL.clusters)
        rows = await self.db.all(lambda row: row, SQL.all_outputs) if clusters else []
        return [with_outputs(c, [r for r in rows if r["cluster"] == c.spec.name], self.cipher)
                for c in clusters]

    # -- join tokens ------------------------------------------------------------
    async def add_join_token(self, cluster: str, token_hash: str, now: float,
                             expires_at: float | None, max_uses: int | None,
                             auto_approve: bool = False) -> JoinToken:
        token = JoinToken(id=token_id(token_hash), cluster=cluster, created_at=now,
                          expires_at=expires_at, max_uses=max_uses, auto_approve=auto_approve)
        await self.db.execute(SQL.insert_join_token, token.id, token_hash, cluster or None, now,
                              expires_at, max_uses, auto_approve)
        return token

    async def list_join_tokens(self, cluster: str | None = None) -> list[JoinToken]:
        if cluster is None:
            return await self.db.all(join_token_from_row, SQL.join_tokens)
        if cluster == POOL:
            return await self.db.all(join_token_from_row, SQL.pool_join_tokens)
        return await self.db.all(join_token_from_row, SQL.cluster_join_tokens, cluster)

    async def join_token(self, token_hash: str) -> JoinToken | None:
        return await self.db.one(join_token_from_row, SQL.join_token, token_hash)

    async def revoke_join_token(self, token_id: str) -> JoinToken | None:
        async with self.db.transaction() as conn:
            row = await conn.fetchrow(SQL.revoke_join_token + " RETURNING *", token_id)
        return None if row is None else join_token_from_row(row)

    # -- admin tokens -------------------------------------------------------------
    async def add_admin_token(self, token_hash: str, name: str, role: str,
                              now: float) -> AdminToken:
        token = AdminToken(id=token_id(token_hash), name=name, role=role, created_at=now)
        await self.db.execute(SQL.insert_admin_token, token.id, token_hash, name, role, now)
        return token

    async def admin_token(self, token_hash: str) -> AdminToken | None:
        return await self.db.one(admin_token_from_row, SQL.admin_token, token_hash)

    async def list_admin_tokens(self) -> list[AdminToken]:
        return await self.db.all(admin_token_from_row, SQL.admin_tokens)

    async def revoke_admin_token(self, token_id: str) -> AdminToken | None:
        async with self.db.transaction() as conn:
            row = await conn.fetchrow(SQL.revoke_admin_token + " RETURNING *", token_id)
        return None if row is None else admin_token_from_row(row)

    # -- machines ---------------------------------------------------------------
    async def get_machine(self, machine_id: str) -> Machine | None:
        return await self.db.one(self._machine, SQL.machine, machine_id)

    async def machine_version(self, machine_id: str) -> Version | None:
        return await self.db.one(version_from_row, SQL.machine_version, machine_id)

    async def credential_owner(self, credential_hash: str) -> CredentialOwner | None:
        if not credential_hash:  # machines without a credential store "": never match them
            return None
        return await self.db.one(credential_owner_from_row, SQL.credential_owner, credential_hash)

    async def move_target(self) -> str | None:
        return await self.db.one(lambda row: str(row[0]), SQL.move_target)

    async def removed_machine(self, machine_id: str) -> RemovedMachine | None:
        return await self.db.one(removed_machine_from_row, SQL.removed_machine, machine_id)

    async def removed_by_hostname(self, hostname: str,
                                  cluster: str | None = None) -> list[RemovedMachine]:
        if cluster is None:
            return await self.db.all(removed_machine_from_row, SQL.removed_named, hostname)
        return await self.db.all(removed_machine_from_row, SQL.cluster_removed_named, cluster,
                                 hostname)

    async def removed_credential(self, credential_hash: str) -> RemovedMachine | None:
        if not credential_hash:
            return None
        return await self.db.one(removed_machine_from_row, SQL.removed_credential, credential_hash)

    async def machine_page(self, query: MachineQuery) -> tuple[list[str], int]:
        """Both statements in one REPEATABLE READ transaction: the count is of the page's
        state."""
        statements = SQL.machine_page(query)
        async with self.db.connection() as conn:
            async def read() -> tuple[list[str], int]:
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    rows = await conn.fetch(statements.page, *statements.params)
                    total = await conn.fetchval(statements.count, *statements.count_params)
                return [row[0] for row in rows], total

            page: tuple[list[str], int] = await self.db.guard(read())
        return page

    async def count_machines(self) -> list[MachineCount]:
        return await self.db.all(machine_count_from_row, SQL.count_machines)

    async def list_machines(self, cluster: str | None = None, role: Role | None = None) -> list[Machine]:
        query, params = SQL.machines(cluster, role)
        return await self.db.all(self._machine, query, *params)

    async def get_machines(self, machine_ids: Collection[str]) -> list[Machine]:
        query, params = SQL.machines_with_ids(list(machine_ids))
        return await self.db.all(self._machine, query, *params)

    async def machines_by_hostname(self, hostname: str, cluster: str | None = None) -> list[Machine]:
        if cluster is None:
            return await self.db.all(self._machine, SQL.machines_named, hostname)
        return await self.db.all(self._machine, SQL.cluster_machines_named, cluster, hostname)

    async def identity_holders(self, values: Collection[tuple[str, str]],
                               excluding: str) -> list[Holder]:
        return [Holder(*row) for kind, value in sorted(values)
                for row in await self.db.all(tuple, SQL.identity_holders, kind, value, excluding)]

    async def machines_last_seen_between(self, cluster: str, start: float, end: float) -> list[str]:
        return await self.db.all(lambda row: str(row["id"]), SQL.last_seen_between,
                                 cluster, start, end)

    async def touch_machines(self, seen: Mapping[str, float]) -> None:
        if not seen:
            return
        async with self.db.transaction() as conn:
            await _lock_machines(conn, list(seen))
            await conn.execute(
                "UPDATE machines SET last_seen = GREATEST(machines.last_seen, seen.at) "
                "FROM unnest($1::text[], $2::double precision[]) AS seen (id, at) "
                "WHERE machines.id = seen.id", list(seen), list(seen.values()))

    # -- atomic writes ----------------------------------------------------------
    async def apply(self, change: Change) -> list[Event]:
        # Encoded before the transaction: a value JSON cannot hold fails with nothing written.
        clusters = [cluster_row(c) for c in change.clusters]
        rows = [machine_to_row(m, self.cipher) for m in change.machines]
        data = [dumps(e.data) for e in change.events]
        removed = list(change.removed)
        kept = output_rows(change.outputs, self.cipher)
        if not change.writes:
            return []
        written = [*(m.id for m in change.machines), *removed]
        async with self.db.transaction() as conn:
            # One UPDATE: its row lock makes concurrent uses (on any replica) wait their turn.
            use = change.token_use
            if use is not None and await conn.fetchrow(SQL.use_join_token + " RETURNING id",
                                                       use.hash, use.at) is None:
                raise TokenRefused("join token not usable")
            if clusters:
                await conn.executemany(SQL.write_cluster, clusters)
            if change.retarget is not None:
                await _retarget(conn, change.retarget.doc)
            if kept:
                await conn.executemany(SQL.keep_output, kept)
            await _lock_machines(conn, written)
            if rows:
                await conn.executemany(SQL.upsert_machine, rows)
            if written:
                await conn.execute("DELETE FROM machine_labels WHERE machine_id = ANY($1::text[])",
                                   written)
                await conn.executemany(SQL.insert_label, label_rows(change.machines))
                await conn.execute("DELETE FROM machine_identities WHERE machine_id = ANY($1::text[])",
                                   written)
                await conn.executemany(SQL.insert_identity, identity_rows(change.machines))
            if removed:
                await conn.executemany(SQL.keep_removed, list(change.removed.items()))
                await conn.execute("DELETE FROM machines WHERE id = ANY($1::text[])", removed)
            for name in change.dropped:
                check_removable(name, await conn.fetchval(SQL.count_cluster_machines, name))
                for statement in SQL.drop_cluster:
                    await conn.execute(statement, name)
            if not change.events:
                return []
            last = await conn.fetchval("UPDATE event_ids SET last = last + $1 RETURNING last",
                                       len(change.events))
            stored = [replace(e, id=last - len(change.events) + 1 + i)
                      for i, e in enumerate(change.events)]
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
        query, params = SQL.events(cluster, machine, since_id, since_time, limit, kinds,
                                   newest_first)
        return await self.db.all(event_from_row, query, *params)

    async def prune_events(self, before: float, keep: int, chunk: int) -> int:
        async with self.db.transaction() as conn:
            through = prune_through(*await conn.fetchrow(SQL.retention_bounds, keep, before),
                                    chunk=chunk)
            if through is None:
                return 0
            status = await conn.execute(SQL.delete_events_through, through)
        return int(status.split()[-1])  # "DELETE n"

    # -- etcd snapshots -------------------------------------------------------------
    async def begin_etcd_snapshot(self, snapshot: EtcdSnapshot) -> None:
        await self.db.execute(SQL.begin_etcd_snapshot, *etcd_snapshot_row(snapshot))

    async def add_etcd_snapshot_chunk(self, snapshot_id: str, seq: int, data: bytes) -> None:
        sealed = sealed_etcd_chunk(self.cipher, snapshot_id, seq, data)
        await self.db.execute(SQL.add_etcd_snapshot_chunk, snapshot_id, seq, sealed)

    async def complete_etcd_snapshot(self, snapshot_id: str, size: int, sha256: str) -> None:
        await self.db.execute(SQL.complete_etcd_snapshot, size, sha256, snapshot_id)

    async def etcd_snapshots(self, cluster: str) -> list[EtcdSnapshot]:
        return await self.db.all(etcd_snapshot_from_row, SQL.etcd_snapshots, cluster)

    async def etcd_snapshot(self, snapshot_id: str) -> EtcdSnapshot | None:
        return await self.db.one(etcd_snapshot_from_row, SQL.etcd_snapshot, snapshot_id)

    async def etcd_snapshot_chunk(self, snapshot_id: str, seq: int) -> bytes | None:
        sealed = await self.db.one(lambda row: str(row["data"]), SQL.etcd_snapshot_chunk,
                                   snapshot_id, seq)
        return None if sealed is None else opened_etcd_chunk(self.cipher, snapshot_id, seq, sealed)

    async def incomplete_etcd_snapshots(self, before: float) -> list[str]:
        return await self.db.all(lambda row: str(row["id"]), SQL.incomplete_etcd_snapshots,
                                 before)

    async def drop_etcd_snapshot(self, snapshot_id: str) -> None:
        async with self.db.transaction() as conn:
            for statement in SQL.drop_etcd_snapshot:
                await conn.execute(statement, snapshot_id)

    # -- snapshots ----------------------------------------------------------------
    async def export(self) -> dict[str, list[dict[str, Any]]]:
        """One REPEATABLE READ transaction: every table as of one moment, while replicas
        go on writing."""
        async with self.db.connection() as conn:
            async def read() -> dict[str, list[dict[str, Any]]]:
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    return {table.name: [table.portable(row)
                                         for row in await conn.fetch(SQL.export[table.name])]
                            for table in TABLES}

            tables: dict[str, list[dict[str, Any]]] = await self.db.guard(read())
        return tables

    async def occupied(self) -> list[str]:
        return await self.db.all(lambda row: str(row["name"]), SQL.occupied)

    async def import_(self, tables: Tables, beside: Collection[str] = ()) -> None:
        """COPY per table, in one transaction; the event ids' counter set past the last
        event imported."""
        async with self.db.transaction() as conn:
            check_importable(tables, beside, [row["name"] for row in await conn.fetch(SQL.occupied)])
            for table in TABLES:
                await conn.copy_records_to_table(
                    table.name, columns=list(table.names),
                    records=[table.values(row) for row in tables.get(table.name, ())])
            await conn.execute("UPDATE event_ids SET last = GREATEST(last, "
                               "COALESCE((SELECT MAX(id) FROM events), 0))")
            await conn.execute(LISTED_FROM_DOCS)
            await conn.execute(IDENTITIES_FROM_DOCS)
            await conn.execute(SQL.mint_epoch, new_epoch())

    # -- replicas -------------------------------------------------------------------
    def mutex(self) -> Mutex:
        return Mutex(self.db)

    async def campaign(self) -> Term:
        return await postgres_replicas.campaign(self.db, self.identity)

    async def listen(self, deliver: Callable[[str], None]) -> bool:
        await postgres_replicas.listen(self.db, deliver)
        return True

    async def publish(self, message: str) -> None:
        await postgres_replicas.publish(self.db, message)
