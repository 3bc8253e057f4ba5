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
  read(stream, source)                     the same, streamed from a file object
  write_archive(snapshot, path) / read_archive(path)   the same, to and from a file (0600)
  save(data, path)                         archive bytes to a file, 0600, atomically
  restore(store, data_dir, snapshot)       into an open, empty store and a data dir without
                                           a coordinator's files (RestoreError otherwise)

The archive is a gzipped tar: manifest.json (format, schema_version, created_at, the source
store's kind, the URL its agents reached it at, each table's row count, and the sha256 and
size of every other member), then tables/NAME.jsonl (one JSON row a line, sql.TABLES'
columns) and files/PATH (the data dir's). What a reader accepts of one, and how much it
unpacks at most, is domain/transfer/archive.py's.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationError

from coordinator.domain.transfer import archive
from coordinator.domain.transfer.archive import FORMAT, MANIFEST, SCHEMA_VERSION, ArchiveError
from coordinator.service import privatefiles
from coordinator.store.base import Store, StoreError
from coordinator.store.cipher import KEY_BYTES, Cipher, key_from_text
from coordinator.store.codec import (
    cluster_output_from_row,
    machine_from_row,
    opened_etcd_chunk,
    spec_from_json,
)
from coordinator.store.sql import TABLE_NAMES, TABLES

# The data dir's files that a coordinator's identity lives in, relative to it: its PKI
# (server/pki.py) and the key its machines' secrets are sealed with (server/secrets_key.py).
# tests/unit/coordinator/test_snapshot_files.py holds these to those modules' names.
DATA_FILES = ("pki/ca.crt", "pki/ca.key", "pki/server.crt", "pki/server.key", "secrets.key")


class RestoreError(Exception):
    """The place a snapshot would be restored into already holds a coordinator's state."""


@dataclass(frozen=True)
class Snapshot:
    tables: Mapping[str, Sequence[Mapping[str, Any]]]  # Store.export's
    files: Mapping[str, bytes]  # path under the data dir (DATA_FILES) -> content
    created_at: float
    source: str  # the kind of store it was taken from (Store.kind)
    # The URL its agents reached it at (its --advertise-url): what a restored one serves at
    # for them to find it. None: an archive from before it was recorded.
    advertise_url: str | None = None

    def counts(self) -> dict[str, int]:
        """Rows per table, as the manifest states them and the CLI shows them."""
        return {name: len(self.tables.get(name, ())) for name in TABLE_NAMES}


async def take(store: Store, data_dir: Path, advertise_url: str | None = None) -> Snapshot:
    """The store's tables in one transaction, and the data dir's identity files (those a
    coordinator serving plain HTTP lacks are left out), with the URL its agents reach it at."""
    tables = await store.export()
    files = {name: (data_dir / name).read_bytes() for name in DATA_FILES
             if (data_dir / name).is_file()}
    return Snapshot(tables, files, time.time(), store.kind, advertise_url)


# -- the archive ------------------------------------------------------------------------------

def to_bytes(snapshot: Snapshot) -> bytes:
    """The archive, whole, in memory: a backup is written at once, a pivot sends it at once."""
    members = {archive.TABLE_MEMBER.format(name): b"".join(
        json.dumps(row, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        for row in snapshot.tables.get(name, ())) for name in TABLE_NAMES}
    members.update((archive.FILE_MEMBER.format(name), data)
                   for name, data in snapshot.files.items())
    manifest = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "created_at": snapshot.created_at,
        "source": snapshot.source, "advertise_url": snapshot.advertise_url,
        "counts": snapshot.counts(),
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


def from_bytes(data: bytes, source: str = "the archive",
               max_unpacked: int = archive.MAX_UNPACKED) -> Snapshot:
    """The snapshot an archive's bytes hold (see read)."""
    return read(io.BytesIO(data), source, max_unpacked)


def read(stream: BinaryIO, source: str, max_unpacked: int = archive.MAX_UNPACKED) -> Snapshot:
    """The snapshot a stream holds, streamed through the archive's rules (domain/transfer/archive.py):
    the manifest first, every member checked against it as it is read, every row as it
    arrives, then the documents as the store will decode them; ArchiveError naming source and
    the member (and row) otherwise, never a snapshot partly read. Memory: what the rows hold,
    at most about max_unpacked, whatever the archive says."""
    try:
        with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
            bounded = _Bounded(unzipped, source, archive.MAX_MANIFEST + _HEADERS)
            with tarfile.open(fileobj=bounded, mode="r|") as tar:
                taken = _read_tar(tar, bounded, source, max_unpacked)
            while bounded.read(_CHUNK):  # to the end: gzip checks its CRC and length there
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise archive.damaged(source, f"it is not a complete gzipped tar ({exc})") from None
    _check_documents(taken, source)
    return taken


# A tar header, with PAX records for a long name, per member; and the end of the archive, with
# tarfile's read-ahead of a record: what a reader unpacks beyond the members' declared sizes.
_HEADERS = 64 << 10
_CHUNK = 64 << 10


class _Bounded:
    """The unpacked stream, refused once more of it is read than the budget allows: no tar
    header, padding or trailing data can make a reader unpack more than the manifest says."""

    def __init__(self, stream: BinaryIO, source: str, budget: int) -> None:
        self.stream = stream
        self.source = source
        self.budget = budget
        self.read_so_far = 0

    def read(self, size: int = -1) -> bytes:
        wanted = self.budget - self.read_so_far + 1 if size < 0 else size
        data = self.stream.read(min(wanted, self.budget - self.read_so_far + 1))
        self.read_so_far += len(data)
        if self.read_so_far > self.budget:
            raise archive.damaged(self.source, "it unpacks to more than its manifest declares")
        return data


def _read_tar(tar: tarfile.TarFile, bounded: _Bounded, source: str,
              max_unpacked: int) -> Snapshot:
    first = tar.next()
    if first is None or first.name != archive.MANIFEST or not first.isfile() or \
            first.size > archive.MAX_MANIFEST:
        raise archive.damaged(source, f"it has no readable {archive.MANIFEST} first")
    handle = tar.extractfile(first)
    manifest = archive.parse_manifest(handle.read() if handle else b"", source, TABLE_NAMES,
                                      DATA_FILES, max_unpacked)
    bounded.budget = bounded.read_so_far + sum(
        member.size + _HEADERS for member in manifest.members.values()) + _HEADERS
    tables: dict[str, list[dict[str, Any]]] = {}
    files: dict[str, bytes] = {}
    while (info := tar.next()) is not None:
        member = manifest.members.get(info.name)
        if member is None:
            raise archive.damaged(source, f"it holds a member its manifest does not list: "
                                          f"{info.name}")
        if info.name in tables or info.name in files:
            raise archive.damaged(source, f"it holds its member {info.name} twice")
        if not info.isfile():
            raise archive.damaged(source, f"its member {info.name} is not a regular file")
        table = _TABLES.get(info.name)
        if table is None:
            files[info.name] = _whole(tar, info, member, source)
            continue
        rows = archive.TableRows(source, info.name, table)
        _stream(tar, info, member, source, rows.feed)
        tables[info.name] = rows.finish()
    missing = sorted(set(manifest.members) - set(tables) - set(files))
    if missing:
        raise archive.damaged(source, f"its member {missing[0]} is missing")
    by_table = {name: tables.get(archive.TABLE_MEMBER.format(name), []) for name in TABLE_NAMES}
    problem = archive.counts_problem(manifest, by_table) or archive.references_problem(by_table)
    if problem:
        raise archive.damaged(source, problem)
    prefix = archive.FILE_MEMBER.format("")
    return Snapshot(by_table, {name[len(prefix):]: data for name, data in files.items()},
                    manifest.created_at, manifest.source, manifest.advertise_url)


_TABLES = {archive.TABLE_MEMBER.format(table.name): archive.Columns(
    dict(table.columns), table.nullable, table.unique, table.optional) for table in TABLES}


def _whole(tar: tarfile.TarFile, info: tarfile.TarInfo, member: archive.Member,
           source: str) -> bytes:
    """A small member's bytes (a file of the data dir's), checked against member."""
    chunks: list[bytes] = []
    _stream(tar, info, member, source, chunks.append)
    return b"".join(chunks)


def _stream(tar: tarfile.TarFile, info: tarfile.TarInfo, member: archive.Member, source: str,
            sink: Callable[[bytes], None]) -> None:
    """The member's bytes, a chunk at a time, checked against member, into sink."""
    check = archive.MemberCheck(source, member)
    handle = tar.extractfile(info)
    while handle is not None and (chunk := handle.read(_CHUNK)):
        check.feed(chunk)
        sink(chunk)
    check.finish()


# How the PKI's files (server/pki.py, pki/*.crt and pki/*.key) are read, by their suffix.
_PEM: dict[str, tuple[str, Callable[[bytes], object]]] = {
    ".crt": ("certificate", x509.load_pem_x509_certificate),
    ".key": ("private key", lambda data: serialization.load_pem_private_key(data, None)),
}


def _check_documents(taken: Snapshot, source: str) -> None:
    """The secrets key a key, the PKI's files a PEM certificate or key, every cluster's spec a
    spec and every machine's document a machine's, its secrets opening with the archive's key:
    as the restored coordinator will read them, so that it never fails on what it took."""
    for name, data in taken.files.items():
        kind, load = _PEM.get(Path(name).suffix, ("", None)) if name.startswith("pki/") \
            else ("", None)
        try:
            if load is not None:
                load(data)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise archive.damaged(source, f"its member {archive.FILE_MEMBER.format(name)} is "
                                          f"not a PEM {kind}") from None
    key = taken.files.get("secrets.key")
    cipher = None
    if key is not None:
        raw = key_from_text(key)
        if raw is None:
            raise archive.damaged(source, f"its member {archive.FILE_MEMBER.format('secrets.key')}"
                                          f" is not a secrets key ({KEY_BYTES} bytes in base64)")
        cipher = Cipher(raw, source)
    where = "row {} of its member " + archive.TABLE_MEMBER + ":"
    for number, row in enumerate(taken.tables["clusters"], 1):
        try:
            spec_from_json(row["spec"])
        except ValidationError as exc:
            error = exc.errors()[0]
            raise archive.damaged(source, f"{where.format(number, 'clusters')} field spec is not "
                                          f"a cluster's spec: {'.'.join(map(str, error['loc']))}"
                                          f": {error['msg']}") from None
    for number, row in enumerate(taken.tables["machines"], 1):
        try:
            machine = machine_from_row(row, cipher)
            problem = archive.listed_problem(json.loads(row["doc"]))
        except (KeyError, TypeError, ValueError, AttributeError, StoreError) as exc:
            raise archive.damaged(source, f"{where.format(number, 'machines')} field doc is not "
                                          f"a machine's ({type(exc).__name__}: {exc})") \
                from None
        if problem is not None:
            raise archive.damaged(source, f"{where.format(number, 'machines')} field doc: "
                                          f"{problem}")
        if machine.id != row["id"]:
            raise archive.damaged(source, f"{where.format(number, 'machines')} field doc is "
                                          f"another machine's ({machine.id})")
    for number, row in enumerate(taken.tables["cluster_outputs"], 1):
        try:
            cluster_output_from_row(row, cipher)
        except (ValueError, StoreError) as exc:
            raise archive.damaged(source, f"{where.format(number, 'cluster_outputs')} field "
                                          f"value does not open with its secrets key "
                                          f"({type(exc).__name__}: {exc})") from None
    _check_etcd_snapshots(taken, source, cipher, where)


def _check_etcd_snapshots(taken: Snapshot, source: str, cipher: Cipher | None,
                          where: str) -> None:
    """Each etcd snapshot's chunks open with the archive's key and are, in order, the bytes
    of its size and SHA-256: a restored coordinator never hands out a damaged one."""
    digests: dict[str, Any] = {row["id"]: hashlib.sha256()
                               for row in taken.tables["etcd_snapshots"]}
    sizes = dict.fromkeys(digests, 0)
    chunks = sorted(enumerate(taken.tables["etcd_snapshot_chunks"], 1),
                    key=lambda found: (found[1]["snapshot"], found[1]["seq"]))
    for number, row in chunks:
        try:
            data = opened_etcd_chunk(cipher, row["snapshot"], row["seq"], row["data"])
        except (ValueError, StoreError) as exc:
            raise archive.damaged(source, f"{where.format(number, 'etcd_snapshot_chunks')} field "
                                          f"data does not open with its secrets key "
                                          f"({type(exc).__name__}: {exc})") from None
        if row["snapshot"] not in digests:
            raise archive.damaged(source, f"{where.format(number, 'etcd_snapshot_chunks')} its "
                                          f"snapshot {row['snapshot']!r} is not in the archive")
        digests[row["snapshot"]].update(data)
        sizes[row["snapshot"]] += len(data)
    for number, row in enumerate(taken.tables["etcd_snapshots"], 1):
        if (sizes[row["id"]], digests[row["id"]].hexdigest()) != (row["size"], row["sha256"]):
            raise archive.damaged(source, f"{where.format(number, 'etcd_snapshots')} its chunks "
                                          f"are not the snapshot of its size and SHA-256")


def write_archive(snapshot: Snapshot, path: Path) -> int:
    """The archive written whole under another name, synced, then renamed over path: a crash
    never leaves half an archive where a backup was. Mode 0600: it holds the CA's key and the
    secrets key. Returns its size in bytes."""
    data = to_bytes(snapshot)
    save(data, path)
    return len(data)


def read_archive(path: Path, max_unpacked: int = archive.MAX_UNPACKED) -> Snapshot:
    """The snapshot the archive at path holds, streamed from the file (see read)."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        return read(handle, str(path), max_unpacked)


def save(data: bytes, path: Path) -> None:
    """data (an archive, or a file of one) at path, as privatefiles.saving writes it."""
    with privatefiles.saving(path) as handle:
        handle.write(data)


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
        privatefiles.sync_directory(directory)
