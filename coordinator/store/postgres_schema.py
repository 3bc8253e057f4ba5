"""The PostgreSQL database's schema: its migrations in order, and how the missing ones are
applied when a replica opens the store. Text columns sort byte-wise (COLLATE "C"), as
SQLite's do, whatever the database's locale."""

from __future__ import annotations

import time
from collections.abc import Sequence

import asyncpg

from coordinator.store.postgres_connections import MIGRATION_LOCK, Database
from coordinator.store.sql import POSTGRES, SchemaVersions

_VERSIONS = SchemaVersions(POSTGRES)

# The listed fields of GET /v1/machines that live in a machine's document, copied into their
# columns and machine_labels: by the migration that made them, and after a snapshot's import
# (which carries the documents only).
LISTED_FROM_DOCS = """
    UPDATE machines SET ip = doc::jsonb ->> 'ip', role = doc::jsonb ->> 'role',
        state_since = COALESCE((doc::jsonb ->> 'state_since')::double precision, 0);
    DELETE FROM machine_labels;
    INSERT INTO machine_labels (machine_id, key, value)
        SELECT machines.id, labels.key, labels.value
        FROM machines, jsonb_each_text(COALESCE(doc::jsonb -> 'labels', '{}')) AS labels;
"""

# The product_uuid and MACs of each machine's `machine-identity` precheck, not ignored, as
# rows of machine_identities (codec.identity_rows writes them with every machine): by the
# migration that made them, and after a snapshot's import. Lowercased as identity_rows does.
IDENTITIES_FROM_DOCS = """
    DELETE FROM machine_identities;
    INSERT INTO machine_identities (machine_id, kind, value)
        SELECT machines.id, found.kind, lower(found.value)
        FROM machines, jsonb_array_elements(CASE WHEN jsonb_typeof(
                doc::jsonb -> 'precheck' -> 'checks') = 'array'
                THEN doc::jsonb -> 'precheck' -> 'checks' ELSE '[]' END) AS checks(item),
            LATERAL (
                SELECT 'product_uuid', checks.item -> 'data' ->> 'product_uuid'
                WHERE jsonb_typeof(checks.item -> 'data' -> 'product_uuid') = 'string'
                UNION
                SELECT 'mac', macs.value FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(
                    checks.item -> 'data' -> 'macs') = 'array'
                    THEN checks.item -> 'data' -> 'macs' ELSE '[]' END) AS macs(value)
            ) AS found(kind, value)
        WHERE checks.item ->> 'name' = 'machine-identity'
          AND NOT COALESCE((checks.item ->> 'ignored')::boolean, false) AND found.value <> ''
        ON CONFLICT DO NOTHING;
"""

# The mark of a database numbered as SQLite's is (migration 1 -> 2 below makes it). One past
# version 1 without it was numbered before they were aligned, when this store's version n (n
# from 2) was SQLite's n + 1: align() moves its versions on by one.
ALIGNED = "schema_aligned"
MARK_ALIGNED = f"CREATE TABLE {ALIGNED} ()"

# Schema migrations in order: MIGRATIONS[n] takes a database from version n to n + 1, the
# same migration at the same number as SQLite's (tests/unit/coordinator/test_migrations.py).
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
    # 1 -> 2: join tokens that expire, count their uses and can be revoked, and admin tokens
    # with roles, which SQLite's 1 -> 2 adds, are in the first schema above already. Here the
    # mark that this database is numbered as SQLite's.
    MARK_ALIGNED,
    # 2 -> 3, for scale: look-ups that must not scan the fleet. A query uses the role index
    # only when it spells the expression exactly as it is here (sql.POSTGRES.doc("role")).
    """
    CREATE INDEX machines_hostname ON machines (hostname);
    CREATE INDEX machines_last_seen ON machines (cluster, last_seen);
    CREATE INDEX machines_role ON machines (cluster, ((doc::jsonb ->> 'role')));
    """,
    # 3 -> 4, for scale: whether a machine responds, as a column: /metrics counts the
    # fleet by it at every scrape (parsing every document took 0.4 s of the server's CPU at
    # 10,000 machines) and every agent request's authentication reads it.
    """
    ALTER TABLE machines ADD COLUMN responding BOOLEAN NOT NULL DEFAULT TRUE;
    UPDATE machines SET responding = COALESCE((doc::jsonb ->> 'responding')::boolean, FALSE);
    """,
    # 4 -> 5: what is kept of a removed machine, so that its agent is told it was deleted.
    """
    CREATE TABLE removed_machines (
        id TEXT COLLATE "C" PRIMARY KEY,
        cluster TEXT COLLATE "C" NOT NULL,
        hostname TEXT COLLATE "C" NOT NULL,
        credential_hash TEXT NOT NULL,
        removed_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX removed_machines_credential ON removed_machines (credential_hash, removed_at);
    """,
    # 5 -> 6: the fingerprint of the key that seals machines' secrets, which every replica
    # must share: one with another key is refused; and a coordinator from before sealing
    # (which would rewrite documents without their sealed secrets) now refuses the database.
    """
    CREATE TABLE secrets_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        fingerprint TEXT NOT NULL
    );
    """,
    # 6 -> 7: a deleted machine's history is found by its hostname (`machines logs HOST`).
    """
    CREATE INDEX removed_machines_hostname ON removed_machines (hostname, removed_at);
    """,
    # 7 -> 8: the coordinator every agent is told to move to (PUT /v1/move-target), one row.
    # Not part of a snapshot: a restored or pivoted-to coordinator names none.
    """
    CREATE TABLE move_target (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        doc TEXT NOT NULL
    );
    """,
    # 8 -> 9, for scale: GET /v1/machines filters, sorts and pages in the database, on
    # columns; the role index moves onto its column. A label is a row of machine_labels
    # (found by key and value through its index). No other index on machines: a heartbeat's
    # update of last_seen (an indexed column, so never a HOT update) writes every one.
    """
    ALTER TABLE machines ADD COLUMN ip TEXT COLLATE "C";
    ALTER TABLE machines ADD COLUMN role TEXT COLLATE "C";
    ALTER TABLE machines ADD COLUMN state_since DOUBLE PRECISION NOT NULL DEFAULT 0;
    CREATE TABLE machine_labels (
        machine_id TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        value TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (machine_id, key)
    );
    CREATE INDEX machine_labels_key ON machine_labels (key, value);
    """ + LISTED_FROM_DOCS + """
    DROP INDEX machines_role;
    CREATE INDEX machines_role ON machines (cluster, role);
    """,
    # 9 -> 10: hostnames are compared as Kubernetes compares node names, lowercased (W1 is
    # w1): registration, `machines get HOST` and a deleted machine's history look them up so.
    """
    DROP INDEX machines_hostname;
    CREATE INDEX machines_hostname ON machines (lower(hostname));
    DROP INDEX removed_machines_hostname;
    CREATE INDEX removed_machines_hostname ON removed_machines (lower(hostname), removed_at);
    """,
    # 10 -> 11: the store's epoch (domain/assignments/etags.py), one row, minted here and again by every
    # import: an agent's tag names it with its generation. Not part of a snapshot: a
    # restored or pivoted-to store mints its own.
    """
    CREATE TABLE store_epoch (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        epoch TEXT NOT NULL
    );
    INSERT INTO store_epoch (id, epoch)
        VALUES (1, substr(md5(random()::text || clock_timestamp()::text), 1, 16));
    """,
    # 11 -> 12: each machine's product_uuid and MACs, one row each, indexed by value: a
    # registration finds the machines sharing one without reading the fleet (domain/machines/clones.py).
    """
    CREATE TABLE machine_identities (
        machine_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (machine_id, kind, value)
    );
    CREATE INDEX machine_identities_value ON machine_identities (kind, value);
    """ + IDENTITIES_FROM_DOCS,
    # 12 -> 13: the outputs a cluster keeps (domain/specs/outputs.py), each value sealed: they
    # outlive the manager that produced them.
    """
    CREATE TABLE cluster_outputs (
        cluster TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        value TEXT NOT NULL,
        machine TEXT NOT NULL,
        hostname TEXT NOT NULL,
        produced_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (cluster, name)
    );
    """,
    # 13 -> 14: the etcd snapshots managers' items upload (service/etcdsnapshots.py), their
    # bytes sealed in chunks of about a MiB.
    """
    CREATE TABLE etcd_snapshots (
        id TEXT COLLATE "C" PRIMARY KEY,
        cluster TEXT COLLATE "C" NOT NULL,
        machine TEXT NOT NULL,
        hostname TEXT NOT NULL,
        item TEXT NOT NULL,
        phase TEXT NOT NULL,
        subject TEXT NOT NULL,
        release TEXT NOT NULL,
        taken_at DOUBLE PRECISION NOT NULL,
        size BIGINT NOT NULL,
        sha256 TEXT NOT NULL,
        complete BOOLEAN NOT NULL
    );
    CREATE INDEX etcd_snapshots_cluster ON etcd_snapshots (cluster, taken_at);
    CREATE TABLE etcd_snapshot_chunks (
        snapshot TEXT COLLATE "C" NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (snapshot, seq)
    );
    """,
    # 14 -> 15: join tokens into the machine pool (no cluster: NULL), and whether such a token
    # approves its machines.
    """
    ALTER TABLE join_tokens ALTER COLUMN cluster DROP NOT NULL;
    ALTER TABLE join_tokens ADD COLUMN auto_approve BOOLEAN DEFAULT FALSE;
    """,
]


async def align(conn: asyncpg.Connection, current: int) -> int:
    """The version of a database at `current`, numbered as SQLite's: one numbered before (past
    version 1, unmarked) has its versions from 2 on moved one on, the first schema's row
    standing for 1 and 2 too (it held what SQLite's 1 -> 2 adds), and the mark made. Run
    under the migration lock, in the transaction of the migration that follows."""
    if current < 2 or await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", ALIGNED):
        return current
    await conn.execute("UPDATE schema_version SET version = -(version + 1) WHERE version >= 2")
    await conn.execute("UPDATE schema_version SET version = -version WHERE version < 0")
    await conn.execute("INSERT INTO schema_version SELECT 2, applied_at FROM schema_version "
                       "WHERE version = 1")
    await conn.execute(MARK_ALIGNED)
    return current + 1


async def migrate(db: Database, migrations: Sequence[str]) -> None:
    """Apply missing migrations, one transaction each, under an advisory lock: replicas
    starting together never apply one twice."""
    while True:
        async with db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute(_VERSIONS.table)
            current = await align(conn, await conn.fetchval(_VERSIONS.current))
            script = _VERSIONS.pending(migrations, current)
            if script is None:
                return
            await conn.execute(script)
            await conn.execute(_VERSIONS.record, current + 1, time.time())
