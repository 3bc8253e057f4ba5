"""The SQLite file's schema: its migrations in order, and how a connection applies the missing
ones; and the transaction every write of the SQLite store takes."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from coordinator.store.sql import SQLITE, SchemaVersions

_VERSIONS = SchemaVersions(SQLITE)

# The listed fields of GET /v1/machines that live in a machine's document, copied into their
# columns and machine_labels: by the migration that made them, and after a snapshot's import
# (which carries the documents only).
LISTED_FROM_DOCS = """
    UPDATE machines SET ip = json_extract(doc, '$.ip'), role = json_extract(doc, '$.role'),
        state_since = COALESCE(json_extract(doc, '$.state_since'), 0);
    DELETE FROM machine_labels;
    INSERT INTO machine_labels (machine_id, key, value)
        SELECT machines.id, labels.key, labels.value
        FROM machines, json_each(machines.doc, '$.labels') AS labels;
"""

# The product_uuid and MACs of each machine's `machine-identity` precheck, not ignored, as
# rows of machine_identities (codec.identity_rows writes them with every machine): by the
# migration that made them, and after a snapshot's import. Lowercased as identity_rows does.
IDENTITIES_FROM_DOCS = """
    DELETE FROM machine_identities;
    INSERT OR IGNORE INTO machine_identities (machine_id, kind, value)
        SELECT machines.id, 'product_uuid', lower(json_extract(checks.value, '$.data.product_uuid'))
        FROM machines, json_each(machines.doc, '$.precheck.checks') AS checks
        WHERE json_extract(checks.value, '$.name') = 'machine-identity'
          AND NOT COALESCE(json_extract(checks.value, '$.ignored'), 0)
          AND json_type(checks.value, '$.data.product_uuid') = 'text'
          AND json_extract(checks.value, '$.data.product_uuid') <> '';
    INSERT OR IGNORE INTO machine_identities (machine_id, kind, value)
        SELECT machines.id, 'mac', lower(macs.value)
        FROM machines, json_each(machines.doc, '$.precheck.checks') AS checks,
             json_each(checks.value, '$.data.macs') AS macs
        WHERE json_extract(checks.value, '$.name') = 'machine-identity'
          AND NOT COALESCE(json_extract(checks.value, '$.ignored'), 0)
          AND macs.type = 'text' AND macs.value <> '';
"""

# Schema migrations in order: MIGRATIONS[n] takes a database from version n to n + 1, the
# same migration at the same number as PostgreSQL's (tests/unit/coordinator/test_migrations.py).
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
    # 2 -> 3, for scale: look-ups that must not scan the fleet. A query uses the role index
    # only when it spells the expression exactly as it is here (sql.SQLITE.doc("role")).
    """
    CREATE INDEX machines_hostname ON machines (hostname);
    CREATE INDEX machines_last_seen ON machines (cluster, last_seen);
    CREATE INDEX machines_role ON machines (cluster, json_extract(doc, '$.role'));
    """,
    # 3 -> 4, for scale: whether a machine responds, as a column: /metrics counts the fleet
    # by it at every scrape and every agent request's authentication reads it.
    """
    ALTER TABLE machines ADD COLUMN responding INTEGER NOT NULL DEFAULT 1;
    UPDATE machines SET responding = COALESCE(json_extract(doc, '$.responding'), 0);
    """,
    # 4 -> 5: what is kept of a removed machine, so that its agent is told it was deleted.
    """
    CREATE TABLE removed_machines (
        id TEXT PRIMARY KEY,
        cluster TEXT NOT NULL,
        hostname TEXT NOT NULL,
        credential_hash TEXT NOT NULL,
        removed_at REAL NOT NULL
    );
    CREATE INDEX removed_machines_credential ON removed_machines (credential_hash, removed_at);
    """,
    # 5 -> 6: the fingerprint of the key that seals machines' secrets, to refuse another key;
    # and a coordinator from before sealing (which would rewrite documents without their
    # sealed secrets) now refuses the database.
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
    # Not part of a snapshot (sql.TABLES): a restored or pivoted-to coordinator names none.
    """
    CREATE TABLE move_target (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        doc TEXT NOT NULL
    );
    """,
    # 8 -> 9, for scale: GET /v1/machines filters, sorts and pages in the database, on
    # columns; the role index moves onto its column. A label is a row of machine_labels
    # (found by key and value through its index). A covering index holds every column a
    # page filters on but last_seen, so that a page's scan never reads the documents and a
    # heartbeat (which changes last_seen only) never writes it.
    """
    ALTER TABLE machines ADD COLUMN ip TEXT;
    ALTER TABLE machines ADD COLUMN role TEXT;
    ALTER TABLE machines ADD COLUMN state_since REAL NOT NULL DEFAULT 0;
    CREATE TABLE machine_labels (
        machine_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (machine_id, key)
    ) WITHOUT ROWID;
    CREATE INDEX machine_labels_key ON machine_labels (key, value);
    """ + LISTED_FROM_DOCS + """
    DROP INDEX machines_role;
    CREATE INDEX machines_role ON machines (cluster, role);
    CREATE INDEX machines_listed ON machines (cluster, state, role, responding, hostname, ip,
                                              state_since, id);
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
    # import: an agent's tag names it with its generation. Not part of a snapshot
    # (sql.TABLES): a restored or pivoted-to store mints its own.
    """
    CREATE TABLE store_epoch (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        epoch TEXT NOT NULL
    );
    INSERT INTO store_epoch (id, epoch) VALUES (1, lower(hex(randomblob(8))));
    """,
    # 11 -> 12: each machine's product_uuid and MACs, one row each, indexed by value: a
    # registration finds the machines sharing one without reading the fleet (domain/machines/clones.py).
    """
    CREATE TABLE machine_identities (
        machine_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (machine_id, kind, value)
    ) WITHOUT ROWID;
    CREATE INDEX machine_identities_value ON machine_identities (kind, value);
    """ + IDENTITIES_FROM_DOCS,
    # 12 -> 13: the outputs a cluster keeps (domain/specs/outputs.py), each value sealed: they
    # outlive the manager that produced them.
    """
    CREATE TABLE cluster_outputs (
        cluster TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        machine TEXT NOT NULL,
        hostname TEXT NOT NULL,
        produced_at REAL NOT NULL,
        PRIMARY KEY (cluster, name)
    ) WITHOUT ROWID;
    """,
    # 13 -> 14: the etcd snapshots managers' items upload (service/etcdsnapshots.py), their
    # bytes sealed in chunks of about a MiB: rows that large keep their rowid.
    """
    CREATE TABLE etcd_snapshots (
        id TEXT PRIMARY KEY,
        cluster TEXT NOT NULL,
        machine TEXT NOT NULL,
        hostname TEXT NOT NULL,
        item TEXT NOT NULL,
        phase TEXT NOT NULL,
        subject TEXT NOT NULL,
        release TEXT NOT NULL,
        taken_at REAL NOT NULL,
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        complete INTEGER NOT NULL
    );
    CREATE INDEX etcd_snapshots_cluster ON etcd_snapshots (cluster, taken_at);
    CREATE TABLE etcd_snapshot_chunks (
        snapshot TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (snapshot, seq)
    );
    """,
    # 14 -> 15: join tokens into the machine pool (no cluster: NULL, which the foreign key lets
    # through), and whether such a token approves its machines. SQLite cannot drop NOT NULL: the
    # table is made again, its rows copied in the order they arrived.
    """
    CREATE TABLE join_tokens_15 (
        hash TEXT PRIMARY KEY,
        cluster TEXT REFERENCES clusters (name),
        created_at REAL NOT NULL,
        id TEXT,
        expires_at REAL,
        max_uses INTEGER,
        uses INTEGER NOT NULL DEFAULT 0,
        revoked INTEGER NOT NULL DEFAULT 0,
        auto_approve INTEGER DEFAULT 0
    );
    INSERT INTO join_tokens_15 (hash, cluster, created_at, id, expires_at, max_uses, uses,
                                revoked)
        SELECT hash, cluster, created_at, id, expires_at, max_uses, uses, revoked
        FROM join_tokens ORDER BY rowid;
    DROP TABLE join_tokens;
    ALTER TABLE join_tokens_15 RENAME TO join_tokens;
    CREATE INDEX join_tokens_cluster ON join_tokens (cluster);
    CREATE UNIQUE INDEX join_tokens_id ON join_tokens (id);
    """,
]


def split_statements(script: str) -> list[str]:
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
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
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


def migrate(conn: sqlite3.Connection, migrations: Sequence[str]) -> None:
    """Apply missing migrations, one transaction each. The version is read under the write
    lock, so two processes opening the same file never apply a migration twice."""
    while True:
        with transaction(conn):
            conn.execute(_VERSIONS.table)
            (current,) = conn.execute(_VERSIONS.current).fetchone()
            script = _VERSIONS.pending(migrations, current)
            if script is None:
                return
            for statement in split_statements(script):
                conn.execute(statement)
            conn.execute(_VERSIONS.record, (current + 1, time.time()))
