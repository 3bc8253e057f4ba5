"""What the SQLite and PostgreSQL stores share: the statements both run, written once and
rendered in each database's dialect; the queries built filter by filter; the bookkeeping of
migrations; and the decisions both make the same way about what they read.

Statements are written with PostgreSQL's numbered parameters ($1, $2...), which SQLite
spells ?1, ?2... No driver here: each store runs the text it is given.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.domain.model import Role
from coordinator.domain.views.machinelist import MachineQuery
from coordinator.store.base import StoreError
from coordinator.store.codec import Row

_NUMBERED = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Dialect:
    """What the two databases spell differently in the statements they share."""

    marker: str  # before a parameter's number: "$" ($1) or "?" (?1)
    greatest: str  # the larger of two values: GREATEST, or SQLite's two-argument MAX
    arrival: str  # a column in insertion order, to break ties of created_at
    field: str  # a field of a machine's JSON document, {} standing for its name
    casts: bool  # whether `field` gives text that a cast turns into its type
    arrays: bool  # whether a list binds as one parameter (an array) or one per element
    role_index: str  # what makes the query planner use the role index ("": it does unasked)
    collate: str  # after a text to sort it by code point, as Python does ("": it does unasked)
    contains: str  # whether the text {0} contains the text {1}

    def param(self, number: int) -> str:
        return f"{self.marker}{number}"

    def render(self, text: str) -> str:
        """text, written with $1, $2..., as this database numbers its parameters."""
        return _NUMBERED.sub(lambda match: self.param(int(match[1])), text)

    def doc(self, name: str, sql_type: str = "") -> str:
        """Field `name` of a machine's document, cast to sql_type where the database needs it.
        A query uses an index on such a field only when it spells it as the index does."""
        expression = self.field.format(name)
        return f"{expression}::{sql_type}" if self.casts and sql_type else expression


SQLITE = Dialect(marker="?", greatest="MAX", arrival="rowid", field="json_extract(doc, '$.{}')",
                 casts=False, arrays=False,
                 # Without statistics SQLite would pick machines_cluster and decode every document.
                 role_index=" INDEXED BY machines_role", collate="", contains="instr({0}, {1}) > 0")
POSTGRES = Dialect(marker="$", greatest="GREATEST", arrival="seq", field="(doc::jsonb ->> '{}')",
                   casts=True, arrays=True, role_index="", collate=' COLLATE "C"',
                   contains="strpos({0}, {1}) > 0")


class Query:
    """A SELECT built condition by condition, numbering its parameters as it goes."""

    def __init__(self, dialect: Dialect, head: str) -> None:
        self.dialect = dialect
        self.head = head
        self.conditions: list[str] = []
        self.params: list[Any] = []

    def bind(self, value: Any) -> str:
        """The parameter that will carry value."""
        self.params.append(value)
        return self.dialect.param(len(self.params))

    def where(self, condition: str, value: Any) -> None:
        """A condition on value, which goes where condition says {}."""
        self.conditions.append(condition.format(self.bind(value)))

    def where_in(self, column: str, values: Sequence[str]) -> None:
        """column is one of values (none of them: no row)."""
        if self.dialect.arrays:
            self.conditions.append(f"{column} = ANY({self.bind(list(values))}::text[])")
        elif values:
            self.conditions.append(f"{column} IN ({', '.join(self.bind(v) for v in values)})")
        else:
            self.conditions.append("FALSE")

    def text(self, tail: str = "") -> str:
        where = f" WHERE {' AND '.join(self.conditions)}" if self.conditions else ""
        return f"{self.head}{where}{tail}"


# The sort fields' columns: a missing value (no role, no IP yet) sorts as the empty string,
# as machinelist._key has it.
_SORTED = {"hostname": "hostname{collate}", "state": "state{collate}",
           "role": "COALESCE(role, ''){collate}", "cluster": "cluster{collate}",
           "ip": "COALESCE(ip, ''){collate}", "last_seen": "last_seen",
           "state_since": "state_since"}


# An offset past it is as good as it: both databases refuse a larger integer, and no fleet
# holds that many machines.
_LARGEST_INTEGER = 2**63 - 1


@dataclass(frozen=True)
class MachinePage:
    """The two statements of a page of machines: its ids in order (page, all of params) and
    how many machines the query selects (count, params but the last two: limit, offset)."""

    count: str
    page: str
    params: list[Any]

    @property
    def count_params(self) -> list[Any]:
        return self.params[:-2]


class SchemaVersions:
    """Migration bookkeeping, alike in both stores: a row per migration applied, and the
    migration a database needs next."""

    table = ("CREATE TABLE IF NOT EXISTS schema_version "
             "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
    current = "SELECT COALESCE(MAX(version), 0) FROM schema_version"

    def __init__(self, dialect: Dialect) -> None:
        self.record = dialect.render("INSERT INTO schema_version VALUES ($1, $2)")

    @staticmethod
    def pending(migrations: Sequence[str], current: int) -> str | None:
        """The script that takes a database at schema version `current` one version on; None
        when it is at the latest. A database a newer coordinator wrote is refused: this one
        cannot know what its schema means."""
        latest = len(migrations)
        if current > latest:
            raise StoreError(f"database schema version {current} is newer than this coordinator "
                             f"supports ({latest}): run a coordinator at least as new as the one "
                             "that wrote it")
        return None if current == latest else migrations[current]


@dataclass(frozen=True)
class Table:
    """A table as a snapshot carries it (Store.export, Store.import_): its columns with their
    kinds, in one portable spelling whichever database it came from (SQLite keeps booleans as
    0 and 1, PostgreSQL has columns of its own such as seq, which are left out)."""

    name: str
    # (name, kind): kind one of text, int, real, bool, or json (text holding a JSON object)
    columns: tuple[tuple[str, str], ...]
    order: str  # the rows' order: an import in that order keeps listings' ties as they were
    nullable: frozenset[str] = frozenset()  # the columns that may be null
    unique: tuple[str, ...] = ()  # the columns no two rows share a value of (keys)
    optional: frozenset[str] = frozenset()  # added since the first archives: theirs lack them
    where: str = ""  # which rows a snapshot carries, when not all

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def portable(self, row: Row) -> dict[str, Any]:
        """A row read from either database, as JSON carries it."""
        return {name: _KINDS[kind](row[name]) if row[name] is not None else None
                for name, kind in self.columns}

    def values(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """A portable row's values in column order, each of its column's type (JSON gives 1
        for 1.0, which PostgreSQL's driver refuses for a DOUBLE PRECISION column)."""
        return tuple(None if row.get(name) is None else _KINDS[kind](row[name])
                     for name, kind in self.columns)

    def select(self, dialect: Dialect) -> str:
        where = f"WHERE {self.where} " if self.where else ""
        return f"SELECT {', '.join(self.names)} FROM {self.name} {where}" \
               f"ORDER BY {self.order.format(arrival=dialect.arrival)}"

    def insert(self, dialect: Dialect) -> str:
        params = ", ".join(dialect.param(n + 1) for n in range(len(self.columns)))
        return f"INSERT INTO {self.name} ({', '.join(self.names)}) VALUES ({params})"


_KINDS: dict[str, Any] = {"text": str, "int": int, "real": float, "bool": bool, "json": str}
_T, _I, _R, _B, _J = "text", "int", "real", "bool", "json"

# The newest complete etcd snapshot of each cluster: the one a backup carries (the others stay
# with the coordinator, within settings.etcdSnapshots.keep).
LATEST_ETCD_SNAPSHOTS = (
    "SELECT kept.id FROM etcd_snapshots AS kept WHERE kept.complete AND NOT EXISTS ("
    "SELECT 1 FROM etcd_snapshots AS newer WHERE newer.cluster = kept.cluster "
    "AND newer.complete AND (newer.taken_at > kept.taken_at "
    "OR (newer.taken_at = kept.taken_at AND newer.id > kept.id)))")
# Its columns are codec.etcd_snapshot_row's, in the order of records.EtcdSnapshot's fields.
ETCD_SNAPSHOTS = Table(
    "etcd_snapshots", (("id", _T), ("cluster", _T), ("machine", _T), ("hostname", _T),
                       ("item", _T), ("phase", _T), ("subject", _T), ("release", _T),
                       ("taken_at", _R), ("size", _I), ("sha256", _T), ("complete", _B)),
    "taken_at, id", unique=("id",), where=f"id IN ({LATEST_ETCD_SNAPSHOTS})")

# Every table of the coordinator's state, parents first (join tokens name their cluster).
# Not here: schema_version (the target's own), secrets_key (claimed by the key the target
# opens with), store_epoch (minted anew by the import), move_target (a restored or pivoted-to
# coordinator names none), PostgreSQL's leader and event_ids (the replicas' bookkeeping) and
# schema_aligned (the mark of its schema's numbering).
TABLES: tuple[Table, ...] = (
    Table("clusters", (("name", _T), ("spec", _J), ("generation", _I), ("created_at", _R),
                       ("updated_at", _R), ("deleting", _B)), "name", unique=("name",)),
    Table("join_tokens", (("id", _T), ("hash", _T), ("cluster", _T), ("created_at", _R),
                          ("expires_at", _R), ("max_uses", _I), ("uses", _I), ("revoked", _B),
                          ("auto_approve", _B)),
          "created_at, {arrival}", frozenset({"cluster", "expires_at", "max_uses",
                                              "auto_approve"}), ("id", "hash"),
          optional=frozenset({"auto_approve"})),
    Table("admin_tokens", (("id", _T), ("hash", _T), ("name", _T), ("role", _T),
                           ("created_at", _R), ("revoked", _B)), "created_at, {arrival}",
          unique=("id", "hash")),
    Table("cluster_outputs", (("cluster", _T), ("name", _T), ("value", _T), ("machine", _T),
                              ("hostname", _T), ("produced_at", _R)), "cluster, name"),
    ETCD_SNAPSHOTS,
    Table("etcd_snapshot_chunks", (("snapshot", _T), ("seq", _I), ("data", _T)),
          "snapshot, seq", where=f"snapshot IN ({LATEST_ETCD_SNAPSHOTS})"),
    Table("machines", (("id", _T), ("cluster", _T), ("hostname", _T), ("state", _T),
                       ("credential_hash", _T), ("responding", _B), ("last_seen", _R),
                       ("doc", _J)), "id", unique=("id",)),
    Table("removed_machines", (("id", _T), ("cluster", _T), ("hostname", _T),
                               ("credential_hash", _T), ("removed_at", _R)), "id",
          unique=("id",)),
    Table("events", (("id", _I), ("time", _R), ("cluster", _T), ("machine", _T),
                     ("hostname", _T), ("kind", _T), ("message", _T), ("data", _J)), "id",
          frozenset({"machine", "hostname"}), ("id",)),
)
TABLE_NAMES = tuple(table.name for table in TABLES)


class Statements:
    """The statements both stores run, in one database's dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = d = dialect
        sql = dialect.render
        # -- clusters
        self.cluster = sql("SELECT * FROM clusters WHERE name = $1")
        self.clusters = "SELECT * FROM clusters ORDER BY name"
        self.respecify_cluster = sql("UPDATE clusters SET spec = $1, generation = generation + 1, "
                                     "updated_at = $2 WHERE name = $3")
        self.write_cluster = sql(  # a change's cluster, as the change decided it (codec.cluster_row)
            "INSERT INTO clusters (name, spec, generation, created_at, updated_at, deleting) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET "
            "spec = excluded.spec, generation = excluded.generation, "
            "updated_at = excluded.updated_at, deleting = excluded.deleting")
        self.count_cluster_machines = sql("SELECT COUNT(*) FROM machines WHERE cluster = $1")
        # a change's cluster dropped (Change.dropped), its join tokens and outputs first
        self.drop_cluster = [sql("DELETE FROM etcd_snapshot_chunks WHERE snapshot IN "
                                 "(SELECT id FROM etcd_snapshots WHERE cluster = $1)")] + [
            sql(f"DELETE FROM {table} WHERE {column} = $1") for table, column in
            (("join_tokens", "cluster"), ("cluster_outputs", "cluster"),
             ("etcd_snapshots", "cluster"), ("clusters", "name"))]
        # -- etcd snapshots (service/etcdsnapshots.py): a record, then its sealed chunks, then
        # marked complete; listed and handed out only once complete
        self.begin_etcd_snapshot = ETCD_SNAPSHOTS.insert(d)
        self.add_etcd_snapshot_chunk = sql("INSERT INTO etcd_snapshot_chunks (snapshot, seq, "
                                           "data) VALUES ($1, $2, $3)")
        self.complete_etcd_snapshot = sql("UPDATE etcd_snapshots SET size = $1, sha256 = $2, "
                                          "complete = TRUE WHERE id = $3")
        self.etcd_snapshots = sql("SELECT * FROM etcd_snapshots WHERE cluster = $1 AND complete "
                                  "ORDER BY taken_at DESC, id DESC")
        self.etcd_snapshot = sql("SELECT * FROM etcd_snapshots WHERE id = $1")
        self.incomplete_etcd_snapshots = sql("SELECT id FROM etcd_snapshots WHERE NOT complete "
                                             "AND taken_at < $1")
        self.etcd_snapshot_chunk = sql("SELECT data FROM etcd_snapshot_chunks "
                                       "WHERE snapshot = $1 AND seq = $2")
        self.drop_etcd_snapshot = [sql("DELETE FROM etcd_snapshot_chunks WHERE snapshot = $1"),
                                   sql("DELETE FROM etcd_snapshots WHERE id = $1")]
        # -- the outputs a cluster keeps: added, never replaced (domain/specs/outputs.py)
        self.all_outputs = "SELECT * FROM cluster_outputs ORDER BY cluster, name"
        self.cluster_outputs = sql("SELECT * FROM cluster_outputs WHERE cluster = $1 "
                                   "ORDER BY name")
        self.keep_output = sql("INSERT INTO cluster_outputs (cluster, name, value, machine, "
                               "hostname, produced_at) VALUES ($1, $2, $3, $4, $5, $6) "
                               "ON CONFLICT (cluster, name) DO NOTHING")
        # -- join tokens
        self.insert_join_token = sql("INSERT INTO join_tokens (id, hash, cluster, created_at, "
                                     "expires_at, max_uses, auto_approve) "
                                     "VALUES ($1, $2, $3, $4, $5, $6, $7)")
        self.join_tokens = f"SELECT * FROM join_tokens ORDER BY created_at, {d.arrival}"
        self.cluster_join_tokens = sql("SELECT * FROM join_tokens WHERE cluster = $1 "
                                       f"ORDER BY created_at, {d.arrival}")
        self.pool_join_tokens = ("SELECT * FROM join_tokens WHERE cluster IS NULL "
                                 f"ORDER BY created_at, {d.arrival}")
        self.join_token = sql("SELECT * FROM join_tokens WHERE hash = $1")
        self.join_token_by_id = sql("SELECT * FROM join_tokens WHERE id = $1")
        self.revoke_join_token = sql("UPDATE join_tokens SET revoked = TRUE WHERE id = $1")
        self.use_join_token = sql(
            "UPDATE join_tokens SET uses = uses + 1 WHERE hash = $1 AND NOT revoked "
            "AND (expires_at IS NULL OR expires_at > $2) AND (max_uses IS NULL OR uses < max_uses)")
        # -- admin tokens
        self.insert_admin_token = sql("INSERT INTO admin_tokens (id, hash, name, role, created_at) "
                                      "VALUES ($1, $2, $3, $4, $5)")
        self.admin_token = sql("SELECT * FROM admin_tokens WHERE hash = $1")
        self.admin_token_by_id = sql("SELECT * FROM admin_tokens WHERE id = $1")
        self.admin_tokens = f"SELECT * FROM admin_tokens ORDER BY created_at, {d.arrival}"
        self.revoke_admin_token = sql("UPDATE admin_tokens SET revoked = TRUE WHERE id = $1")
        # -- machines
        self.machine = sql("SELECT doc, last_seen FROM machines WHERE id = $1")
        # A long-poll's one lookup: the machine's generation and the store's epoch together
        # (domain/assignments/etags.py), so that a tag never pairs one with another state's other.
        self.machine_version = sql(f"SELECT {d.doc('generation', 'bigint')} AS generation, "
                                   "(SELECT epoch FROM store_epoch WHERE id = 1) AS epoch "
                                   "FROM machines WHERE id = $1")
        # The document's fields read by the database: several times faster than decoding it.
        self.credential_owner = sql(
            f"SELECT id, cluster, hostname, {d.doc('credential_expires_at', 'double precision')} "
            "AS expires_at, responding FROM machines WHERE credential_hash = $1")
        self.count_machines = ("SELECT cluster, state, responding, COUNT(*) AS count "
                               "FROM machines GROUP BY cluster, state, responding")
        # By hostname as Kubernetes compares node names (model.same_hostname), on the index of
        # lower(hostname): a query uses it only when it spells the expression as it does.
        self.machines_named = sql("SELECT doc, last_seen FROM machines "
                                  "WHERE lower(hostname) = lower($1) ORDER BY cluster")
        self.cluster_machines_named = sql("SELECT doc, last_seen FROM machines "
                                          "WHERE cluster = $1 AND lower(hostname) = lower($2)")
        self.last_seen_between = sql("SELECT id FROM machines WHERE cluster = $1 "
                                     "AND last_seen >= $2 AND last_seen < $3")
        # A commit may carry a machine read before a heartbeat touched it: last_seen never
        # goes back. The values are codec.machine_to_row's.
        self.upsert_machine = sql(
            "INSERT INTO machines (id, cluster, hostname, state, credential_hash, responding, "
            "last_seen, doc, ip, role, state_since) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
            "$10, $11) ON CONFLICT (id) DO UPDATE SET cluster = excluded.cluster, "
            "hostname = excluded.hostname, state = excluded.state, "
            "credential_hash = excluded.credential_hash, responding = excluded.responding, "
            f"last_seen = {d.greatest}(machines.last_seen, excluded.last_seen), doc = excluded.doc, "
            "ip = excluded.ip, role = excluded.role, state_since = excluded.state_since")
        # A machine's labels, one row each (machine_labels): rewritten with its row.
        self.insert_label = sql("INSERT INTO machine_labels (machine_id, key, value) "
                                "VALUES ($1, $2, $3)")
        # Its product_uuid and MACs (machine_identities): likewise; and the other machines
        # holding one value, through the index on (kind, value).
        self.insert_identity = sql("INSERT INTO machine_identities (machine_id, kind, value) "
                                   "VALUES ($1, $2, $3)")
        self.identity_holders = sql(
            "SELECT i.kind, i.value, m.id, m.hostname, m.cluster FROM machine_identities i "
            "JOIN machines m ON m.id = i.machine_id "
            "WHERE i.kind = $1 AND i.value = $2 AND i.machine_id <> $3")

        # -- removed machines: what is kept of each, written as its row is deleted
        self.keep_removed = sql(
            "INSERT INTO removed_machines (id, cluster, hostname, credential_hash, removed_at) "
            "SELECT id, cluster, hostname, credential_hash, CAST($2 AS DOUBLE PRECISION) "
            "FROM machines WHERE id = $1 ON CONFLICT (id) DO UPDATE SET "
            "cluster = excluded.cluster, hostname = excluded.hostname, "
            "credential_hash = excluded.credential_hash, removed_at = excluded.removed_at")
        self.removed_machine = sql("SELECT * FROM removed_machines WHERE id = $1")
        self.removed_named = sql("SELECT * FROM removed_machines WHERE lower(hostname) = "
                                 "lower($1) ORDER BY removed_at DESC LIMIT 100")
        self.cluster_removed_named = sql("SELECT * FROM removed_machines WHERE lower(hostname) "
                                         "= lower($2) AND cluster = $1 "
                                         "ORDER BY removed_at DESC LIMIT 100")
        self.removed_credential = sql("SELECT * FROM removed_machines WHERE credential_hash = $1 "
                                      "ORDER BY removed_at DESC LIMIT 1")
        # -- the fingerprint of the key that seals the machines' secrets: the first store
        # opened with a key records its own, and any other key is refused (cipher.verify)
        self.claim_secrets_key = sql("INSERT INTO secrets_key (id, fingerprint) VALUES (1, $1) "
                                     "ON CONFLICT (id) DO NOTHING")
        self.secrets_key = "SELECT fingerprint FROM secrets_key"
        # -- the store's epoch (domain/assignments/etags.py): minted by its migration, again by imports
        self.mint_epoch = sql("INSERT INTO store_epoch (id, epoch) VALUES (1, $1) "
                              "ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch")
        # -- the coordinator agents are told to move to: one row or none
        self.move_target = "SELECT doc FROM move_target WHERE id = 1"
        self.put_move_target = sql("INSERT INTO move_target (id, doc) VALUES (1, $1) "
                                   "ON CONFLICT (id) DO UPDATE SET doc = excluded.doc")
        self.clear_move_target = "DELETE FROM move_target"
        # -- the event history's retention: where it ends (prune_through), each bound by the
        # primary key: the oldest id, the newest beyond the count kept ($1), the first one
        # recent enough to keep ($2: walks only the expired ones), the newest
        self.retention_bounds = sql(
            "SELECT (SELECT MIN(id) FROM events), "
            "(SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET $1), "
            "(SELECT id FROM events WHERE time >= $2 ORDER BY id LIMIT 1), "
            "(SELECT MAX(id) FROM events)")
        self.delete_events_through = sql("DELETE FROM events WHERE id <= $1")
        # -- snapshots: every table read whole and written whole (Store.export, import_)
        self.export = {table.name: table.select(d) for table in TABLES}
        self.import_ = {table.name: table.insert(d) for table in TABLES}
        self.occupied = " UNION ALL ".join(
            f"SELECT '{name}' AS name FROM (SELECT 1 FROM {name} LIMIT 1) AS {name}_row"
            for name in TABLE_NAMES)

    def machines(self, cluster: str | None, role: Role | None) -> tuple[str, list[Any]]:
        """See Store.list_machines: with a role, through the index on (cluster, role)."""
        hint = self.dialect.role_index if role and cluster is not None else ""
        query = Query(self.dialect, f"SELECT doc, last_seen FROM machines{hint}")
        if cluster is not None:
            query.where("cluster = {}", cluster)
        if role is not None:
            query.where("role = {}", role)
        return query.text(" ORDER BY cluster, hostname, id"), query.params

    def machine_page(self, query: MachineQuery) -> MachinePage:
        """GET /v1/machines' page as the database answers it, by the rules that
        domain.views.machinelist.select spells in Python (a property test holds them equal): the
        listed fields are columns, the labels rows of machine_labels."""
        d = self.dialect
        where = Query(d, "FROM machines")
        if query.cluster is not None:
            where.where("cluster = {}", query.cluster)
        if query.states:
            where.where_in("state", sorted(query.states))
        if query.role is not None:
            where.where("role = {}", query.role)
        if query.responding is not None:
            where.where("responding = {}", query.responding)
        if query.ids:
            where.where_in("id", sorted(query.ids))
        for key, value in query.labels:
            label = f"machine_id = machines.id AND key = {where.bind(key)}"
            if value is not None:
                label += f" AND value = {where.bind(value)}"
            where.conditions.append(f"EXISTS (SELECT 1 FROM machine_labels WHERE {label})")
        if query.search:
            search = where.bind(query.search)
            where.conditions.append(f"({d.contains.format('lower(hostname)', search)} OR "
                                    f"{d.contains.format('lower(ip)', search)})")
        count = where.text()
        order = "DESC" if query.descending else "ASC"
        column = _SORTED[query.sort].format(collate=d.collate)
        page = where.text(f" ORDER BY {column} {order}, id {order} "
                          f"LIMIT {where.bind(query.limit)} "
                          f"OFFSET {where.bind(min(query.offset, _LARGEST_INTEGER))}")
        return MachinePage(count=f"SELECT COUNT(*) {count}", page=f"SELECT id {page}",
                           params=where.params)

    def machines_with_ids(self, ids: Sequence[str]) -> tuple[str, list[Any]]:
        query = Query(self.dialect, "SELECT doc, last_seen FROM machines")
        query.where_in("id", ids)
        return query.text(), query.params

    def events(self, cluster: str | None, machine: str | None, since_id: int,
               since_time: float | None, limit: int, kinds: Sequence[str] | None,
               newest_first: bool) -> tuple[str, list[Any]]:
        """See Store.list_events: every filter in the query, none applied after the limit."""
        query = Query(self.dialect, "SELECT * FROM events")
        query.where("id > {}", since_id)
        if cluster is not None:
            query.where("cluster = {}", cluster)
        if machine is not None:
            query.where("machine = {}", machine)
        if since_time is not None:
            query.where("time >= {}", since_time)
        if kinds is not None:
            query.where_in("kind", kinds)
        order = "DESC" if newest_first else "ASC"
        return query.text(f" ORDER BY id {order} LIMIT {query.bind(limit)}"), query.params


def check_importable(tables: Mapping[str, Sequence[Mapping[str, Any]]], beside: Collection[str],
                     occupied: Sequence[str]) -> None:
    """An import goes only into a store that holds nothing (occupied: the tables that have a
    row), and only of the tables a snapshot has: never merged into another coordinator's state."""
    unknown = sorted(set(tables) - set(TABLE_NAMES))
    if unknown:
        raise StoreError(f"cannot import unknown tables {', '.join(unknown)}")
    carried = sorted(set(beside) & {name for name, rows in tables.items() if rows})
    if carried:
        raise StoreError(f"cannot import rows of {', '.join(carried)} beside the store's own")
    occupied = [name for name in occupied if name not in beside]
    if occupied:
        raise StoreError(f"the store already holds a coordinator's state (rows in "
                         f"{', '.join(occupied)}): restore into an empty database")


def prune_through(oldest: int | None, beyond_count: int | None, first_recent: int | None,
                  newest: int | None, chunk: int) -> int | None:
    """The last event id a prune deletes (None: nothing to delete): the events beyond the count
    kept and those older than the age kept (up to the first recent one, in id order), at most
    chunk of them, oldest first, so that one prune never holds the store for long."""
    if oldest is None or newest is None:
        return None
    expired = newest if first_recent is None else first_recent - 1
    cutoff = max(expired, beyond_count or 0)
    return min(cutoff, oldest + chunk - 1) if cutoff >= oldest else None


def check_removable(cluster: str, machines: int) -> None:
    """A cluster goes only once its machines have: their records name it."""
    if machines:
        raise StoreError(f"cluster {cluster} still has {machines} machines: remove them first")
