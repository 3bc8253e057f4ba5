"""A coordinator's whole state as one value, and as one portable file: what `coordinator
backup` writes, `coordinator restore` reads, and a pivot carries to another coordinator.

A snapshot holds every table of the store (Store.export: clusters, join and admin tokens as
hashes, machines with their secrets still sealed, removed machines, the event history) and the
files of the data dir that make the coordinator who it is to its agents and its database: the
PKI (CA and server certificates and keys) and the secrets key. So an archive is as secret as
the data dir itself.

The public surface (the pivot uses it as it is):
  take(store, data_dir) -> Snapshot        one consistent snapshot of a running coordinator
  to_bytes(snapshot) / from_bytes(data)    the archive's bytes (ArchiveError when refused)
  write_archive(snapshot, path) / read_archive(path)   the same, to and from a file (0600)
  save(data, path)                         archive bytes to a file, 0600, atomically
  restore(store, data_dir, snapshot)       into an open, empty store and a data dir without
                                           a coordinator's files (RestoreError otherwise)

The archive is a gzipped tar: manifest.json (format, schema_version, created_at, the source
store's kind, each table's row count, and the sha256 and size of every other member), then
tables/NAME.jsonl (one JSON row a line, sql.TABLES' columns) and files/PATH (the data dir's).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.store.base import Store, StoreError
from coordinator.store.sql import TABLE_NAMES

FORMAT = "nodeagent-coordinator-backup"
# The archive's layout and the tables' columns. A reader refuses a newer one: it cannot know
# what was added. Raise it with any change to sql.TABLES, and teach read() the older ones.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
# The data dir's files that a coordinator's identity lives in, relative to it: its PKI
# (server/pki.py) and the key its machines' secrets are sealed with (server/secrets_key.py).
# tests/unit/coordinator/test_snapshot_files.py holds these to those modules' names.
DATA_FILES = ("pki/ca.crt", "pki/ca.key", "pki/server.crt", "pki/server.key", "secrets.key")
_TABLE_MEMBER = "tables/{}.jsonl"
_FILE_MEMBER = "files/{}"


class ArchiveError(Exception):
    """An archive that cannot be restored: damaged, not a backup, or from a newer coordinator.
    The message names the file, what is wrong and what to do."""


class RestoreError(Exception):
    """The place a snapshot would be restored into already holds a coordinator's state."""


@dataclass(frozen=True)
class Snapshot:
    tables: Mapping[str, Sequence[Mapping[str, Any]]]  # Store.export's
    files: Mapping[str, bytes]  # path under the data dir (DATA_FILES) -> content
    created_at: float
    source: str  # the kind of store it was taken from (Store.kind)

    def counts(self) -> dict[str, int]:
        """Rows per table, as the manifest states them and the CLI shows them."""
        return {name: len(self.tables.get(name, ())) for name in TABLE_NAMES}


async def take(store: Store, data_dir: Path) -> Snapshot:
    """The store's tables in one transaction, and the data dir's identity files (those a
    coordinator serving plain HTTP lacks are left out)."""
    tables = await store.export()
    files = {name: (data_dir / name).read_bytes() for name in DATA_FILES
             if (data_dir / name).is_file()}
    return Snapshot(tables, files, time.time(), store.kind)


# -- the archive ------------------------------------------------------------------------------

def to_bytes(snapshot: Snapshot) -> bytes:
    """The archive, whole, in memory: a backup is written at once, a pivot sends it at once."""
    members = {_TABLE_MEMBER.format(name): b"".join(
        json.dumps(row, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        for row in snapshot.tables.get(name, ())) for name in TABLE_NAMES}
    members.update((_FILE_MEMBER.format(name), data) for name, data in snapshot.files.items())
    manifest = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "created_at": snapshot.created_at,
        "source": snapshot.source, "counts": snapshot.counts(),
        "members": {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                    for name, data in members.items()},
    }
    buffer = io.BytesIO()
    # mtime 0 and fixed modes: the same snapshot always gives the same bytes.
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in {MANIFEST: json.dumps(manifest, indent=1).encode(), **members}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(snapshot.created_at)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def from_bytes(data: bytes, source: str = "the archive") -> Snapshot:
    """The snapshot an archive holds, every member checked against the manifest's sha256;
    ArchiveError naming source otherwise (never a snapshot partly read)."""
    members = _members(data, source)
    manifest = _manifest(members, source)
    listed: dict[str, Any] = manifest["members"]
    for name, expected in listed.items():
        found = members.get(name)
        if found is None:
            raise _damaged(source, f"its member {name} is missing")
        if not isinstance(expected, dict) or \
                hashlib.sha256(found).hexdigest() != expected.get("sha256"):
            raise _damaged(source, f"its member {name} does not match the manifest's checksum")
    unlisted = sorted(set(members) - set(listed) - {MANIFEST})
    if unlisted:
        raise _damaged(source, f"it holds members the manifest does not list: {unlisted[0]}")
    try:
        tables = {name: [json.loads(line) for line in members[_TABLE_MEMBER.format(name)]
                         .splitlines()] for name in TABLE_NAMES}
    except (KeyError, ValueError) as exc:
        raise _damaged(source, f"a table cannot be read ({exc})") from None
    files = {name[len(_FILE_MEMBER.format("")):]: content for name, content in members.items()
             if name.startswith(_FILE_MEMBER.format(""))}
    unknown = sorted(set(files) - set(DATA_FILES))
    if unknown:
        raise _damaged(source, f"it holds a file a coordinator does not keep: {unknown[0]}")
    return Snapshot(tables, files, float(manifest.get("created_at", 0.0)),
                    str(manifest.get("source", "unknown")))


def _members(data: bytes, source: str) -> dict[str, bytes]:
    """Every regular file of the gzipped tar (gzip's CRC and length catch a truncated or
    flipped stream before the checksums do)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members: dict[str, bytes] = {}
            for info in tar:
                handle = tar.extractfile(info) if info.isfile() else None
                if handle is not None:
                    members[info.name] = handle.read()
            return members
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _damaged(source, f"it is not a complete gzipped tar ({exc})") from None


def _manifest(members: Mapping[str, bytes], source: str) -> dict[str, Any]:
    try:
        manifest = json.loads(members[MANIFEST])
    except (KeyError, ValueError):
        raise _damaged(source, f"it has no readable {MANIFEST}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{source} is not a coordinator backup (no {FORMAT} manifest): "
                           "give the file `coordinator backup --out` wrote")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or not isinstance(manifest.get("members"), dict):
        raise _damaged(source, f"its {MANIFEST} lacks a schema_version or its members")
    if version > SCHEMA_VERSION:
        raise ArchiveError(f"{source} has schema version {version}, newer than this "
                           f"coordinator reads ({SCHEMA_VERSION}): restore it with a coordinator "
                           "at least as new as the one that took it")
    return manifest


def _damaged(source: str, what: str) -> ArchiveError:
    return ArchiveError(f"{source} is damaged: {what}. Nothing was restored: use another copy "
                        "of the backup, or take a new one")


def write_archive(snapshot: Snapshot, path: Path) -> int:
    """The archive written whole under another name, synced, then renamed over path: a crash
    never leaves half an archive where a backup was. Mode 0600: it holds the CA's key and the
    secrets key. Returns its size in bytes."""
    data = to_bytes(snapshot)
    save(data, path)
    return len(data)


def read_archive(path: Path) -> Snapshot:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc.strerror}") from None
    return from_bytes(data, str(path))


def save(data: bytes, path: Path) -> None:
    """data (an archive, or a file of one) at path, mode 0600, atomically and durably
    (datadir.py's rule for what is secret)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- restoring --------------------------------------------------------------------------------

def check_free(data_dir: Path) -> None:
    """RestoreError unless data_dir holds none of a coordinator's identity files: a restore
    never replaces another coordinator's PKI or key."""
    taken = [name for name in DATA_FILES if (data_dir / name).exists()]
    if taken:
        raise RestoreError(f"{data_dir} already holds a coordinator's files ({', '.join(taken)}):"
                           " restore into a new, empty data dir")


async def restore(store: Store, data_dir: Path, snapshot: Snapshot) -> None:
    """The snapshot's tables into store (open, empty: one transaction) and its files into
    data_dir (0600, directories 0700). The files are staged first and moved into place only
    once the store has committed: a refusal or a failure leaves neither half written."""
    check_free(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = data_dir / f".restoring-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        await asyncio.to_thread(_stage, staging, snapshot.files)
        try:
            await store.import_(snapshot.tables)
        except StoreError as exc:
            raise RestoreError(f"cannot restore into the store: {exc}") from None
        await asyncio.to_thread(_place, staging, data_dir, list(snapshot.files))
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(staging)


def _stage(staging: Path, files: Mapping[str, bytes]) -> None:
    staging.mkdir(mode=0o700)
    for name, data in files.items():
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        save(data, target)


def _place(staging: Path, data_dir: Path, names: Sequence[str]) -> None:
    """Each staged file renamed into data_dir (same file system: atomic each), then synced."""
    for name in names:
        target = data_dir / name
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(staging / name, target)
    for directory in {data_dir, *((data_dir / name).parent for name in names)}:
        _sync_directory(directory)
