"""The backup archive: what it carries reads back the same, and a damaged, foreign or newer
one is refused with a message saying what is wrong and what to do, never a snapshot partly
read."""

from __future__ import annotations

import gzip
import io
import json
import stat
import tarfile
from pathlib import Path

import pytest

from coordinator.server import secrets_key
from coordinator.server.pki import Pki
from coordinator.service.snapshot import (
    DATA_FILES,
    ArchiveError,
    Snapshot,
    from_bytes,
    read_archive,
    to_bytes,
    write_archive,
)
from tests.support.archives import repacked

SNAPSHOT = Snapshot(
    tables={"clusters": [{"name": "edge", "spec": "{}", "generation": 2, "created_at": 1.0,
                          "updated_at": 2.5, "deleting": False}],
            "events": [{"id": 7, "time": 3.0, "cluster": "edge", "machine": None,
                        "hostname": None, "kind": "audit", "message": "m", "data": "{}"}]},
    files={"pki/ca.key": b"-----BEGIN PRIVATE KEY-----\n", "secrets.key": b"a2V5\n"},
    created_at=1700000000.25, source="sqlite")


def test_an_archive_reads_back_the_snapshot_it_was_made_of() -> None:
    data = to_bytes(SNAPSHOT)
    back = from_bytes(data)
    assert back.files == SNAPSHOT.files
    assert (back.created_at, back.source) == (SNAPSHOT.created_at, "sqlite")
    assert back.tables["clusters"] == SNAPSHOT.tables["clusters"]
    assert back.tables["events"] == SNAPSHOT.tables["events"]
    assert back.tables["machines"] == []
    assert to_bytes(back) == data  # the same snapshot, the same bytes


def test_the_manifest_states_format_schema_counts_and_checksums() -> None:
    with tarfile.open(fileobj=io.BytesIO(to_bytes(SNAPSHOT)), mode="r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert (manifest["format"], manifest["schema_version"], manifest["source"]) == \
        ("nodeagent-coordinator-backup", 1, "sqlite")
    assert manifest["counts"]["clusters"] == 1 and manifest["counts"]["machines"] == 0
    assert set(manifest["members"]) == {
        *(f"tables/{name}.jsonl" for name in manifest["counts"]),
        "files/pki/ca.key", "files/secrets.key"}
    assert all(len(m["sha256"]) == 64 for m in manifest["members"].values())


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "text"])
def test_a_damaged_archive_is_refused_saying_so(damage: str) -> None:
    data = to_bytes(SNAPSHOT)
    damaged = {"flip": data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x01])
               + data[len(data) // 2 + 1:],
               "truncate": data[:len(data) - 20], "empty": b"",
               "text": b"just some text\n"}[damage]
    with pytest.raises(ArchiveError, match=r"^backup.tgz is damaged: .* Nothing was restored: "
                                           r"use another copy of the backup, or take a new one$"):
        from_bytes(damaged, "backup.tgz")


def test_a_member_that_does_not_match_its_checksum_is_refused() -> None:
    data = to_bytes(SNAPSHOT)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    manifest["members"]["files/secrets.key"]["sha256"] = "0" * 64
    with pytest.raises(ArchiveError, match=r"member files/secrets.key does not match the "
                                           r"manifest.s checksum"):
        from_bytes(repacked(data, members=manifest["members"]), "backup.tgz")


def test_a_newer_schema_version_is_refused_naming_both_versions() -> None:
    with pytest.raises(ArchiveError, match=r"backup.tgz has schema version 2, newer than this "
                                           r"coordinator reads \(1\): restore it with a "
                                           "coordinator at least as new"):
        from_bytes(repacked(to_bytes(SNAPSHOT), schema_version=2), "backup.tgz")


def test_another_tar_is_not_taken_for_a_backup() -> None:
    with pytest.raises(ArchiveError, match="is not a coordinator backup"):
        from_bytes(repacked(to_bytes(SNAPSHOT), format="something-else"), "backup.tgz")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as packed:
        packed.write(b"\0" * 1024)  # an empty tar
    with pytest.raises(ArchiveError, match=r"has no readable manifest\.json"):
        from_bytes(buffer.getvalue(), "backup.tgz")


def test_the_archive_file_is_private_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "backup.tgz"
    path.write_bytes(b"an older backup")
    size = write_archive(SNAPSHOT, path)
    assert size == path.stat().st_size
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_archive(path).files == SNAPSHOT.files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.tgz"]
    with pytest.raises(ArchiveError, match=r"cannot read .*missing.tgz: No such file"):
        read_archive(tmp_path / "missing.tgz")


def test_the_files_a_snapshot_carries_are_those_the_server_keeps(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    kept = {pki.ca_cert, pki.ca_key, pki.server_cert, pki.server_key,
            tmp_path / secrets_key.FILE_NAME}
    assert {tmp_path / name for name in DATA_FILES} == kept
