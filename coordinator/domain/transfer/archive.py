"""The backup archive's rules, apart from the I/O of its bytes (service/snapshot.py streams
the gzipped tar through them): nothing in an archive is trusted before its manifest, and
nothing the manifest declares is taken on trust either.

- The manifest comes first and is small; it names every member with its size and sha256, and
  what it declares in all is held to a cap on what a reader unpacks (`max_unpacked`): an
  archive that would unpack to more is refused before any member is read.
- Each member is checked as it streams (`MemberCheck`): refused at the first byte beyond its
  declared size, and, at its end, when shorter or when its sha256 differs.
- Each table's rows are checked as they arrive (`TableRows`), one line at a time, a line never
  longer than `MAX_ROW`: a JSON object holding exactly its table's columns, each of its kind,
  keys unique. A refusal names the member and the row.

So a reader's memory is bounded by the cap whatever an archive says (a bomb of zeros is
refused at its first long line or its first byte beyond what was declared), and every
malformed archive is refused with a message naming what is wrong, never an exception from
deeper down.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMAT = "nodeagent-coordinator-backup"
# The archive's layout and the tables' columns. A reader refuses a newer one: it cannot know
# what was added. Raise it with any change to sql.TABLES, and teach the reader the older ones.
SCHEMA_VERSION = 4
# The tables added after the first schema, with the version that added them: an older archive
# has none of their rows (2: the outputs a cluster keeps, which machines' documents held; 3:
# each cluster's newest etcd snapshot). 4 added a column (join tokens into the pool: whether
# they approve), which an older archive's rows lack: sql.Table.optional.
ADDED_IN = {"cluster_outputs": 2, "etcd_snapshots": 3, "etcd_snapshot_chunks": 3}
MANIFEST = "manifest.json"
TABLE_MEMBER = "tables/{}.jsonl"
FILE_MEMBER = "files/{}"
# What a reader unpacks at most, unless told otherwise: about three times the largest state the
# default retention keeps for 10,000 machines (a million events). The rows read are held in
# memory until imported, so this bounds the reader's memory too.
MAX_UNPACKED = 1 << 30
MAX_MANIFEST = 1 << 20  # a dozen members' sizes and checksums: a few KiB
MAX_ROW = 16 << 20  # a machine's document with its facts and precheck report: tens of KiB
MAX_FILE = 1 << 20  # a PEM certificate or key, the secrets key: a few KiB
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArchiveError(Exception):
    """An archive that cannot be restored: damaged, not a backup, or from a newer coordinator.
    The message names the file, what is wrong and what to do."""


def damaged(source: str, what: str) -> ArchiveError:
    return ArchiveError(f"{source} is damaged: {what}. Nothing was restored: use another copy "
                        "of the backup, or take a new one")


def too_large(source: str, size: int, limit: int) -> ArchiveError:
    return ArchiveError(f"{source} would unpack to {_mib(size)}, more than the {_mib(limit)} "
                        "this coordinator reads: nothing was restored. A backup that large is "
                        "restored with `coordinator restore --max-unpacked MIB`")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


@dataclass(frozen=True)
class Member:
    """A member as the manifest declares it."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    created_at: float
    source: str
    counts: Mapping[str, int]
    members: Mapping[str, Member]
    advertise_url: str | None = None  # where its agents reached it (None: an older archive)


def parse_manifest(data: bytes, source: str, tables: Sequence[str], files: Collection[str],
                   max_unpacked: int) -> Manifest:
    """The manifest's text checked: a backup's format, a schema this reader knows, every table
    and only known members, each with a size and a sha256, in all no more than max_unpacked."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        raise damaged(source, f"its {MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{source} is not a coordinator backup (no {FORMAT} manifest): "
                           "give the file `coordinator backup --out` wrote")
    version, listed = manifest.get("schema_version"), manifest.get("members")
    if type(version) is not int or not isinstance(listed, dict):
        raise damaged(source, f"its {MANIFEST} lacks a schema_version or its members")
    if version > SCHEMA_VERSION:
        raise ArchiveError(f"{source} has schema version {version}, newer than this "
                           f"coordinator reads ({SCHEMA_VERSION}): restore it with a coordinator "
                           "at least as new as the one that took it")
    created_at, taken_from = manifest.get("created_at", 0.0), manifest.get("source", "unknown")
    counts, url = manifest.get("counts", {}), manifest.get("advertise_url")
    if not _number(created_at) or not isinstance(taken_from, str) or \
            not isinstance(counts, dict) or not all(type(n) is int for n in counts.values()) or \
            not isinstance(url, str | None):
        raise damaged(source, f"its {MANIFEST}'s created_at, source, counts or advertise_url is "
                              "not of its type")
    known_files = {FILE_MEMBER.format(name) for name in files}
    known = known_files | {TABLE_MEMBER.format(name) for name in tables}
    members = {name: _member(source, name, entry, known, known_files)
               for name, entry in listed.items()}
    missing = [TABLE_MEMBER.format(t) for t in tables if TABLE_MEMBER.format(t) not in members
               and ADDED_IN.get(t, 1) <= version]
    if missing:
        raise damaged(source, f"its {MANIFEST} does not list the member {missing[0]}")
    declared = sum(member.size for member in members.values())
    if declared > max_unpacked:
        raise too_large(source, declared, max_unpacked)
    return Manifest(float(created_at), taken_from, counts, members, url)


def _member(source: str, name: str, entry: Any, known: Collection[str],
            known_files: Collection[str]) -> Member:
    if name not in known:
        raise damaged(source, f"it holds a member a coordinator does not keep: {name}")
    if not isinstance(entry, dict) or type(entry.get("size")) is not int or entry["size"] < 0 \
            or not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
        raise damaged(source, f"its {MANIFEST} gives the member {name} no size or sha256")
    if name in known_files and entry["size"] > MAX_FILE:
        raise damaged(source, f"its member {name} is declared {entry['size']} bytes, more than "
                              f"a coordinator's file ({MAX_FILE})")
    return Member(name, entry["size"], entry["sha256"])


class MemberCheck:
    """A member's bytes as they are read, against what the manifest declared of it."""

    def __init__(self, source: str, member: Member) -> None:
        self.source = source
        self.member = member
        self.read = 0
        self._digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        """ArchiveError at the first byte beyond the declared size."""
        self.read += len(chunk)
        if self.read > self.member.size:
            raise damaged(self.source, f"its member {self.member.name} is larger than the "
                                       f"{self.member.size} bytes its manifest declares")
        self._digest.update(chunk)

    def finish(self) -> None:
        if self.read != self.member.size:
            raise damaged(self.source, f"its member {self.member.name} is {self.read} bytes, "
                                       f"not the {self.member.size} its manifest declares")
        if self._digest.hexdigest() != self.member.sha256:
            raise damaged(self.source, f"its member {self.member.name} does not match the "
                                       "manifest's checksum")


@dataclass(frozen=True)
class Columns:
    """A table's rows as an archive carries them (sql.Table's, passed in: the domain names no
    store): each column's kind (text, int, real, bool, or json: text holding a JSON object),
    those that may be null, and those no two rows share a value of."""

    kinds: Mapping[str, str]
    nullable: Collection[str] = ()
    unique: Sequence[str] = ()
    optional: Collection[str] = ()  # added since: an older archive's rows lack them (null)

    @functools.cached_property
    def checks(self) -> tuple[tuple[str, Callable[[Any], bool], bool], ...]:
        """Each column's name, the check of its kind and whether it may be null: looked up
        once, not for each of a million rows."""
        return tuple((name, _KIND_CHECKS[kind], name in self.nullable)
                     for name, kind in self.kinds.items())


@dataclass
class TableRows:
    """A table member's rows, parsed and checked a line at a time as its bytes arrive."""

    source: str
    member: str
    columns: Columns
    rows: list[dict[str, Any]] = field(default_factory=list)
    _partial: bytearray = field(default_factory=bytearray)
    _seen: dict[str, set[Any]] = field(default_factory=dict)

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._partial += chunk[start:end]
            self._add(bytes(self._partial))
            self._partial.clear()
            start = end + 1
        self._partial += chunk[start:]
        if len(self._partial) > MAX_ROW:
            raise self._refused(len(self.rows) + 1, f"it is longer than {MAX_ROW} bytes")

    def finish(self) -> list[dict[str, Any]]:
        if self._partial:
            self._add(bytes(self._partial))
            self._partial.clear()
        return self.rows

    def _add(self, line: bytes) -> None:
        number = len(self.rows) + 1
        if len(line) > MAX_ROW:
            raise self._refused(number, f"it is longer than {MAX_ROW} bytes")
        try:
            row = _decoded(line.decode())
        except (ValueError, RecursionError):
            raise self._refused(number, "it is not JSON (or nested too deep)") from None
        problem = row_problem(row, self.columns)
        if problem is None:
            problem = self._duplicate(row)
        if problem is not None:
            raise self._refused(number, problem)
        self.rows.append(row)

    def _duplicate(self, row: Mapping[str, Any]) -> str | None:
        for name in self.columns.unique:
            seen = self._seen.setdefault(name, set())
            if row[name] in seen:
                return f"it repeats the {name} {row[name]!r} of an earlier row"
            seen.add(row[name])
        return None

    def _refused(self, number: int, what: str) -> ArchiveError:
        return damaged(self.source, f"row {number} of its member {self.member}: {what}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# JSON as a backup writes it (allow_nan=False): NaN and Infinity are refused. One decoder for
# every row: making one per call cost more than the decoding of a short row.
_JSON = json.JSONDecoder(parse_constant=_no_constant)


def _decoded(text: str) -> Any:
    """text's JSON value: compact JSON (as a backup writes it) without json.loads' search for
    whitespace around it, which cost a third of reading a row; any other through it."""
    try:
        value, end = _JSON.raw_decode(text)
    except ValueError:
        end = -1
    return value if end == len(text) else _JSON.decode(text)


def row_problem(row: Any, columns: Columns) -> str | None:
    """What is wrong with a row (None: nothing): a JSON object of exactly its columns, each of
    its kind or null where it may be."""
    if not isinstance(row, dict):
        return f"it is a JSON {_json_type(row)}, not an object"
    for name, check, nullable in columns.checks:
        value = row.get(name, _MISSING)
        if value is _MISSING and name in columns.optional:
            continue
        if not check(value) and (value is not None or not nullable):
            if value is _MISSING:
                return f"it has no field {name}"
            return f"field {name} is {_json_type(value)}, not {_KIND_NAMES[columns.kinds[name]]}"
    if len(row) > len(columns.kinds) or not set(row) <= columns.kinds.keys():
        unknown = sorted(set(row) - set(columns.kinds))
        return f"it has a field its table lacks: {unknown[0]}"
    return None


_MISSING = object()


def _integer(value: Any) -> bool:
    """A JSON integer the databases' 64-bit integers hold."""
    return type(value) is int and -(2**63) <= value < 2**63


def _number(value: Any) -> bool:
    """A finite JSON number (1e999 reads as infinity, which no later backup could write)."""
    return _integer(value) or (type(value) is float and math.isfinite(value))


def _json_object(value: Any) -> bool:
    try:
        return isinstance(value, str) and isinstance(_decoded(value), dict)
    except (ValueError, RecursionError):
        return False


def _text(value: Any) -> bool:
    return type(value) is str


def _boolean(value: Any) -> bool:
    return type(value) is bool


_KIND_CHECKS = {"text": _text, "int": _integer, "real": _number, "bool": _boolean,
                "json": _json_object}
_KIND_NAMES = {"text": "text", "int": "a 64-bit integer", "real": "a finite number",
               "bool": "a boolean", "json": "text holding a JSON object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "text"
    return {bool: "boolean", int: "integer", float: "number", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


# The fields of a machine's document the store reads itself, into columns a listing filters
# and sorts on (LISTED_FROM_DOCS), with their kinds: a wrong one fails the store's import.
_LISTED_FIELDS = {"ip": "text", "role": "text", "state_since": "real"}


def listed_problem(doc: Mapping[str, Any]) -> str | None:
    """What is wrong with the fields of a machine's document the store reads (None: nothing):
    ip, role and state_since of their kinds (or null), labels an object of text."""
    for name, kind in _LISTED_FIELDS.items():
        value = doc.get(name)
        if value is not None and not _KIND_CHECKS[kind](value):
            return f"its {name} is {_json_type(value)}, not {_KIND_NAMES[kind]}"
    labels = doc.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        return "its labels are not an object of text"
    return None


def references_problem(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> str | None:
    """A join token names a cluster the archive holds (the store's foreign key), or none (a
    token into the pool)."""
    clusters = {row["name"] for row in tables.get("clusters", ())}
    for number, row in enumerate(tables.get("join_tokens", ()), 1):
        if row["cluster"] is not None and row["cluster"] not in clusters:
            return f"row {number} of its member {TABLE_MEMBER.format('join_tokens')}: its " \
                   f"cluster {row['cluster']!r} is not in the archive"
    return None


def counts_problem(manifest: Manifest, tables: Mapping[str, Sequence[Any]]) -> str | None:
    """The manifest's row counts, where it states them, are the rows found."""
    for name, rows in tables.items():
        stated = manifest.counts.get(name)
        if stated is not None and stated != len(rows):
            return f"its member {TABLE_MEMBER.format(name)} holds {len(rows)} rows, not the " \
                   f"{stated} its manifest counts"
    return None
