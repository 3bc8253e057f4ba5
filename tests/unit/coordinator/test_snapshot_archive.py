"""The backup archive: what it carries reads back the same, and a damaged, foreign or newer
one is refused with a message saying what is wrong and what to do, never a snapshot partly
read."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import stat
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from coordinator.domain.records import ClusterOutput, EtcdSnapshot
from coordinator.domain.transfer.archive import ADDED_IN, MAX_ROW, SCHEMA_VERSION
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
from coordinator.store.cipher import Cipher
from coordinator.store.codec import (
    etcd_snapshot_row,
    machine_to_row,
    output_rows,
    sealed_etcd_chunk,
    spec_to_json,
)
from coordinator.store.sql import TABLES
from tests.support.archives import bomb, members, packed, repacked
from tests.support.builders import ONE_ITEM, TEST_CIPHER, cluster, full_machine, with_secrets

SNAPSHOT = Snapshot(
    tables={"clusters": [{"name": "edge", "spec": spec_to_json(cluster(worker=ONE_ITEM)),
                          "generation": 2, "created_at": 1.0,
                          "updated_at": 2.5, "deleting": False}],
            "events": [{"id": 7, "time": 3.0, "cluster": "edge", "machine": None,
                        "hostname": None, "kind": "audit", "message": "m", "data": "{}"}]},
    files={"pki/ca.key": ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()),
           "secrets.key": base64.b64encode(bytes(32)) + b"\n"},
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
        ("nodeagent-coordinator-backup", 4, "sqlite")
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
    with pytest.raises(ArchiveError, match=rf"backup.tgz has schema version {SCHEMA_VERSION + 1}, "
                                           rf"newer than this coordinator reads "
                                           rf"\({SCHEMA_VERSION}\): restore it with a "
                                           "coordinator at least as new"):
        from_bytes(repacked(to_bytes(SNAPSHOT), schema_version=SCHEMA_VERSION + 1), "backup.tgz")


@pytest.mark.parametrize(("table", "added"), sorted(ADDED_IN.items()))
def test_an_archive_older_than_a_table_reads_back_with_none_of_its_rows(table: str,
                                                                        added: int) -> None:
    """Taken before the table existed (before clusters kept outputs, before etcd snapshots):
    its member is not missing from the archive, its rows are none; from the version that
    added it on, it is."""
    contents = members(to_bytes(SNAPSHOT))
    listed = json.loads(contents["manifest.json"])
    del listed["members"][f"tables/{table}.jsonl"], listed["counts"][table]
    del contents[f"tables/{table}.jsonl"]
    for version, readable in ((added - 1, True), (added, False)):
        contents["manifest.json"] = json.dumps({**listed, "schema_version": version}).encode()
        if readable:
            back = from_bytes(packed(contents), "old.tgz")
            assert back.tables[table] == []
            assert back.tables["clusters"] == SNAPSHOT.tables["clusters"]
        else:
            with pytest.raises(ArchiveError, match=rf"does not list the member "
                                                   rf"tables/{table}\.jsonl"):
                from_bytes(packed(contents), "new.tgz")


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


# -- what the reader refuses, whatever the manifest says --------------------------------------

MACHINE = with_secrets(full_machine("m-1"))
ETCD_SNAPSHOT = EtcdSnapshot("s-1", "edge", "m-0", "h", "etcd-snapshot", "upgrade", "h", "2",
                             1.0, 4, hashlib.sha256(b"etcd").hexdigest(), True)
TABLE_COLUMNS = {table.name: table.names for table in TABLES}
FULL = Snapshot(
    tables={**SNAPSHOT.tables,
            "join_tokens": [{"id": "t-1", "hash": "h-1", "cluster": "edge", "created_at": 1.0,
                             "expires_at": None, "max_uses": None, "uses": 0, "revoked": False,
                             "auto_approve": False},
                            {"id": "t-2", "hash": "h-2", "cluster": None, "created_at": 2.0,
                             "expires_at": None, "max_uses": 3, "uses": 1, "revoked": False,
                             "auto_approve": True}],
            "admin_tokens": [{"id": "a-1", "hash": "h-a", "name": "initial", "role": "admin",
                              "created_at": 1.0, "revoked": False}],
            "machines": [dict(zip(("id", "cluster", "hostname", "state", "credential_hash",
                                   "responding", "last_seen", "doc"),
                                  machine_to_row(MACHINE, TEST_CIPHER), strict=False))],
            "removed_machines": [{"id": "m-0", "cluster": "edge", "hostname": "h",
                                  "credential_hash": "c", "removed_at": 1.0}],
            "cluster_outputs": [dict(zip(("cluster", "name", "value", "machine", "hostname",
                                          "produced_at"), row, strict=True))
                                for row in output_rows({"edge": {"init.caCertHash": ClusterOutput(
                                    "sha256:ab", "m-0", "h", 1.0)}}, TEST_CIPHER)],
            "etcd_snapshots": [dict(zip(TABLE_COLUMNS["etcd_snapshots"], etcd_snapshot_row(
                ETCD_SNAPSHOT), strict=True))],
            "etcd_snapshot_chunks": [{"snapshot": "s-1", "seq": 0, "data": sealed_etcd_chunk(
                TEST_CIPHER, "s-1", 0, b"etcd")}]},
    files={"secrets.key": base64.b64encode(bytes(range(32))) + b"\n"},  # TEST_CIPHER's
    created_at=1.0, source="sqlite")
WRONG = {"text": 1, "int": "1", "real": "1.5", "bool": "true", "json": "[]"}


def test_a_full_snapshot_reads_back_with_its_machine_and_its_secrets() -> None:
    back = from_bytes(to_bytes(FULL))
    assert back.tables == {name: list(rows) for name, rows in FULL.tables.items()}


def test_a_join_token_of_an_archive_older_than_the_pool_reads_back_without_auto_approval(
        ) -> None:
    """Schema 3 archives' join tokens have no auto_approve (added with the pool's tokens): read
    back as they are, the store takes them as tokens that do not approve."""
    old = [{key: value for key, value in FULL.tables["join_tokens"][0].items()
            if key != "auto_approve"}]
    back = from_bytes(to_bytes(replace(FULL, tables={**FULL.tables, "join_tokens": old})))
    assert back.tables["join_tokens"] == old


@pytest.mark.parametrize(("table", "column", "kind"), [
    (table.name, name, kind) for table in TABLES for name, kind in table.columns])
def test_every_field_of_every_table_of_the_wrong_type_is_refused_naming_member_and_row(
        table: str, column: str, kind: str) -> None:
    """What restore and the pivot's import both read: a field the store would have taken (as
    text, say) or failed on is refused first, naming where it is."""
    rows = [dict(row) for row in FULL.tables[table]]
    rows[0][column] = WRONG[kind]
    crafted = to_bytes(replace(FULL, tables={**FULL.tables, table: rows}))
    with pytest.raises(ArchiveError, match=rf"^b.tgz is damaged: row 1 of its member "
                                           rf"tables/{table}.jsonl: field {column} is "):
        from_bytes(crafted, "b.tgz")
    nullable = next(t for t in TABLES if t.name == table).nullable
    if column not in nullable:
        rows[0][column] = None
        with pytest.raises(ArchiveError, match=rf"field {column} is null, not "):
            from_bytes(to_bytes(replace(FULL, tables={**FULL.tables, table: rows})), "b.tgz")


@pytest.mark.parametrize(("change", "problem"), [
    ({"machines": [{**FULL.tables["machines"][0], "doc": "{}"}]},
     r"row 1 of its member tables/machines.jsonl: field doc is not a machine's \(TypeError"),
    ({"machines": [{**FULL.tables["machines"][0], "doc": json.dumps(
        {**json.loads(FULL.tables["machines"][0]["doc"]), "state": "Sideways"})}]},
     r"row 1 of its member tables/machines.jsonl: field doc is not a machine's \(ValueError: "
     "'Sideways' is not a valid MachineState"),
    *[({"machines": [{**FULL.tables["machines"][0], "doc": json.dumps(
        {**json.loads(FULL.tables["machines"][0]["doc"]), field: value})}]},
       f"row 1 of its member tables/machines.jsonl: field doc: its {problem}")
      for field, value, problem in [("ip", 7, "ip is integer, not text"),
                                    ("role", ["worker"], "role is array, not text"),
                                    ("state_since", "1", "state_since is text, not a finite number"),
                                    ("labels", ["a"], "labels are not an object of text"),
                                    ("labels", {"a": 1}, "labels are not an object of text")]],
    ({"machines": [{**FULL.tables["machines"][0], "id": "m-2"}]},
     "row 1 of its member tables/machines.jsonl: field doc is another machine's"),
    ({"clusters": [{**FULL.tables["clusters"][0], "spec": '{"name": "edge"}'}]},
     "row 1 of its member tables/clusters.jsonl: field spec is not a cluster's spec: "),
    ({"join_tokens": [{**FULL.tables["join_tokens"][0], "cluster": "gone"}]},
     "row 1 of its member tables/join_tokens.jsonl: its cluster 'gone' is not in the archive"),
    ({"machines": FULL.tables["machines"] * 2},
     "row 2 of its member tables/machines.jsonl: it repeats the id 'm-1' of an earlier row"),
])
def test_a_row_the_store_could_not_decode_is_refused_naming_member_and_row(
        change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ArchiveError, match=f"^b.tgz is damaged: {problem}"):
        from_bytes(to_bytes(replace(FULL, tables={**FULL.tables, **change})), "b.tgz")


def test_a_secrets_key_that_is_not_one_or_does_not_open_the_secrets_is_refused() -> None:
    for key in (b"not base64!\n", base64.b64encode(b"short") + b"\n"):
        with pytest.raises(ArchiveError, match=r"its member files/secrets.key is not a secrets "
                                               r"key \(32 bytes in base64\)"):
            from_bytes(to_bytes(replace(FULL, files={"secrets.key": key})), "b.tgz")
    other = base64.b64encode(bytes(32)) + b"\n"
    with pytest.raises(ArchiveError, match=r"row 1 of its member tables/machines.jsonl: field "
                                           r"doc is not a machine's \(SecretsKeyError"):
        from_bytes(to_bytes(replace(FULL, files={"secrets.key": other})), "b.tgz")
    outputs_only = {**FULL.tables, "machines": [], "removed_machines": []}
    with pytest.raises(ArchiveError, match=r"row 1 of its member tables/cluster_outputs.jsonl: "
                                           r"field value does not open with its secrets key"):
        from_bytes(to_bytes(replace(FULL, tables=outputs_only,
                                    files={"secrets.key": other})), "b.tgz")


def test_an_etcd_snapshot_whose_chunks_are_not_its_bytes_is_refused() -> None:
    """Sealed with another key, moved to another place, changed, or missing one: a restored
    coordinator would hand out a snapshot that restores nothing."""
    chunk = FULL.tables["etcd_snapshot_chunks"][0]
    other = Cipher(bytes(32), "another key")
    damaged = [
        ({**chunk, "data": sealed_etcd_chunk(other, "s-1", 0, b"etcd")},
         r"row 1 of its member tables/etcd_snapshot_chunks.jsonl: field data does not open "
         r"with its secrets key"),
        ({**chunk, "seq": 1}, r"field data does not open with its secrets key"),
        ({**chunk, "data": sealed_etcd_chunk(TEST_CIPHER, "s-1", 0, b"ETCD")},
         r"row 1 of its member tables/etcd_snapshots.jsonl: its chunks are not the snapshot "
         r"of its size and SHA-256"),
        (None, r"its chunks are not the snapshot of its size and SHA-256"),
    ]
    for row, refusal in damaged:
        tables = {**FULL.tables, "etcd_snapshot_chunks": [row] if row else []}
        with pytest.raises(ArchiveError, match=refusal):
            from_bytes(to_bytes(replace(FULL, tables=tables)), "b.tgz")


def test_a_pki_file_that_is_not_pem_is_refused_naming_it() -> None:
    for name, kind in (("pki/ca.crt", "certificate"), ("pki/server.key", "private key")):
        with pytest.raises(ArchiveError, match=f"its member files/{name} is not a PEM {kind}"):
            from_bytes(to_bytes(replace(FULL, files={**FULL.files, name: b"garbage"})), "b.tgz")


def test_members_out_of_the_manifest_s_order_or_kind_are_refused() -> None:
    contents = members(to_bytes(FULL))
    manifest = contents.pop("manifest.json")
    with pytest.raises(ArchiveError, match=r"it has no readable manifest.json first"):
        from_bytes(packed({**contents, "manifest.json": manifest}), "b.tgz")
    with pytest.raises(ArchiveError, match=r"it holds a member its manifest does not list: "
                                           r"extra"):
        from_bytes(packed({"manifest.json": manifest, "extra": b"", **contents}), "b.tgz")
    with pytest.raises(ArchiveError, match=r"its member files/secrets.key is missing"):
        from_bytes(packed({"manifest.json": manifest, **{
            name: data for name, data in contents.items() if name != "files/secrets.key"}}),
                   "b.tgz")


def test_a_bomb_is_refused_at_the_first_byte_beyond_what_it_declares_or_before_it() -> None:
    """A gzip of 20 MiB of zeros (20 KiB), in three disguises: the manifest lying about its
    size, declaring it (rows of zeros: refused at the first row longer than a row may be), or
    declaring more than the reader unpacks (refused before any member is read)."""
    data = to_bytes(FULL)
    events = "tables/events.jsonl"
    declared = bomb(data, events, 20 << 20, 20 << 20)
    cases = {
        "lies": (bomb(data, events, 20 << 20), None, rf"its member {events} is larger than "
                                                     r"the \d+ bytes its manifest declares"),
        "declares": (declared, None,
                     rf"row 1 of its member {events}: it is longer than {MAX_ROW} bytes"),
        "over the cap": (declared, 8 << 20, r"would unpack to 20.\d MiB, more than the 8.0 MiB this "
                                            r"coordinator reads"),
    }
    for name, (content, cap, problem) in cases.items():
        with pytest.raises(ArchiveError, match=f"^b.tgz .*{problem}"):
            from_bytes(content, "b.tgz", *([cap] if cap else []))
        assert len(content) < 64 << 10, name
