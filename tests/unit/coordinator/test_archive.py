"""The archive's rules (domain/transfer/archive.py): a manifest held to the cap before any member is
read, each member to its declared size and sha256 as it streams, each row to its table's
columns as it arrives; every refusal names the member and the row."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from coordinator.domain.transfer.archive import (
    MAX_ROW,
    ArchiveError,
    Columns,
    Member,
    MemberCheck,
    TableRows,
    parse_manifest,
    references_problem,
)

EVENTS = Columns({"id": "int", "time": "real", "machine": "text", "kind": "text",
                  "ok": "bool", "data": "json"}, nullable={"machine"}, unique=("id",))
GOOD = {"id": 1, "time": 2, "machine": None, "kind": "state", "ok": True, "data": "{}"}


def manifest(**members: Any) -> bytes:
    return json.dumps({"format": "nodeagent-coordinator-backup", "schema_version": 1,
                       "members": members}).encode()


def entry(size: int) -> dict[str, Any]:
    return {"size": size, "sha256": "0" * 64}


def parsed(data: bytes, cap: int = 1000) -> Any:
    return parse_manifest(data, "b.tgz", ["events"], ["secrets.key"], cap)


def test_a_manifest_that_declares_more_than_the_cap_is_refused_before_any_member() -> None:
    assert parsed(manifest(**{"tables/events.jsonl": entry(600),
                              "files/secrets.key": entry(400)})).members[
        "files/secrets.key"] == Member("files/secrets.key", 400, "0" * 64)
    with pytest.raises(ArchiveError, match=r"^b.tgz would unpack to 0.0 MiB, more than the 0.0 MiB "
                                           r"this coordinator reads: .* --max-unpacked MIB`$"):
        parsed(manifest(**{"tables/events.jsonl": entry(601), "files/secrets.key": entry(400)}))


@pytest.mark.parametrize(("members", "problem"), [
    ({}, "does not list the member tables/events.jsonl"),
    ({"tables/events.jsonl": entry(1), "tables/other.jsonl": entry(1)},
     "holds a member a coordinator does not keep: tables/other.jsonl"),
    ({"tables/events.jsonl": entry(1), "files/../../etc/passwd": entry(1)},
     r"does not keep: files/\.\./\.\./etc/passwd"),
    ({"tables/events.jsonl": {"size": "1", "sha256": "0" * 64}},
     "gives the member tables/events.jsonl no size or sha256"),
    ({"tables/events.jsonl": {"size": -1, "sha256": "0" * 64}}, "no size or sha256"),
    ({"tables/events.jsonl": {"size": 1, "sha256": "xyz"}}, "no size or sha256"),
    ({"tables/events.jsonl": [1]}, "no size or sha256"),
    ({"tables/events.jsonl": entry(1), "files/secrets.key": entry(2 << 20)},
     r"files/secrets.key is declared 2097152 bytes, more than a coordinator's file"),
])
def test_a_manifest_naming_what_a_coordinator_does_not_keep_is_refused(
        members: dict[str, Any], problem: str) -> None:
    with pytest.raises(ArchiveError, match=f"^b.tgz is damaged: .*{problem}"):
        parsed(manifest(**members), cap=10 << 20)


def test_a_manifest_s_own_fields_of_the_wrong_type_are_refused() -> None:
    for field in ({"created_at": "yesterday"}, {"source": 1}, {"counts": {"events": "2"}},
                  {"advertise_url": ["https://coord.example:8080"]}):
        data = json.loads(manifest(**{"tables/events.jsonl": entry(1)}))
        with pytest.raises(ArchiveError, match="created_at, source, counts or advertise_url is "
                                               "not of its type"):
            parsed(json.dumps({**data, **field}).encode())
    with pytest.raises(ArchiveError, match="lacks a schema_version"):
        parsed(json.dumps({"format": "nodeagent-coordinator-backup", "schema_version": True,
                           "members": {}}).encode())


def test_a_member_is_refused_at_the_first_byte_beyond_its_size_and_on_a_wrong_digest() -> None:
    content = b"abc"
    member = Member("files/secrets.key", 3, hashlib.sha256(content).hexdigest())
    check = MemberCheck("b.tgz", member)
    check.feed(content)
    with pytest.raises(ArchiveError, match=r"member files/secrets.key is larger than the 3 bytes "
                                           r"its manifest declares"):
        check.feed(b"d")
    short = MemberCheck("b.tgz", member)
    short.feed(b"ab")
    with pytest.raises(ArchiveError, match=r"files/secrets.key is 2 bytes, not the 3"):
        short.finish()
    other = MemberCheck("b.tgz", Member("files/secrets.key", 3, "0" * 64))
    other.feed(content)
    with pytest.raises(ArchiveError, match=r"member files/secrets.key does not match the "
                                           r"manifest's checksum"):
        other.finish()
    check = MemberCheck("b.tgz", member)
    check.feed(content)
    check.finish()


def rows_of(*lines: bytes, chunk: int = 5) -> list[dict[str, Any]]:
    reader = TableRows("b.tgz", "tables/events.jsonl", EVENTS)
    data = b"\n".join(lines) + b"\n"
    for start in range(0, len(data), chunk):  # rows split across chunks, as a stream gives them
        reader.feed(data[start:start + chunk])
    return reader.finish()


def line(**changes: Any) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_rows_that_fit_their_columns_are_read_across_chunks() -> None:
    assert rows_of(line(), line(id=2, machine="m-1", time=2.5)) == [
        GOOD, {**GOOD, "id": 2, "machine": "m-1", "time": 2.5}]


@pytest.mark.parametrize(("bad", "problem"), [
    (b"[1, 2]", "it is a JSON array, not an object"),
    (b"7", "it is a JSON integer, not an object"),
    (b"{not json", r"it is not JSON \(or nested too deep\)"),
    (b'{"id": NaN}', r"it is not JSON \(or nested too deep\)"),
    (b"[" * 100_000, r"it is not JSON \(or nested too deep\)"),
    (line(id=2**63), "field id is integer, not a 64-bit integer"),
    (line(time=0).replace(b'"time": 0', b'"time": 1e999'),
     "field time is number, not a finite number"),
    (line(data='{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
     "field data is text, not text holding a JSON object"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "data"}).encode(), "it has no field data"),
    (line(id="1"), "field id is text, not a 64-bit integer"),
    (line(id=True), "field id is boolean, not a 64-bit integer"),
    (line(id=1.5), "field id is number, not a 64-bit integer"),
    (line(time="2"), "field time is text, not a finite number"),
    (line(kind=None), "field kind is null, not text"),
    (line(kind=["state"]), "field kind is array, not text"),
    (line(ok=1), "field ok is integer, not a boolean"),
    (line(data="[]"), "field data is text, not text holding a JSON object"),
    (line(data={"a": 1}), "field data is object, not text holding a JSON object"),
    (line(extra=1), "it has a field its table lacks: extra"),
])
def test_a_row_that_does_not_fit_its_columns_is_refused_naming_member_and_row(
        bad: bytes, problem: str) -> None:
    with pytest.raises(ArchiveError, match=r"^b.tgz is damaged: row 2 of its member "
                                           rf"tables/events.jsonl: {problem}\. Nothing was"):
        rows_of(line(), bad)


def test_a_repeated_key_and_an_endless_row_are_refused() -> None:
    with pytest.raises(ArchiveError, match=r"row 2 of its member tables/events.jsonl: it repeats the "
                                           r"id 1 of an earlier row"):
        rows_of(line(), line())
    reader = TableRows("b.tgz", "tables/events.jsonl", EVENTS)
    with pytest.raises(ArchiveError, match=f"row 1 of .*: it is longer than {MAX_ROW} bytes"):
        for _ in range(MAX_ROW // (1 << 20) + 1):
            reader.feed(bytes(1 << 20))


def test_a_join_token_names_a_cluster_the_archive_holds() -> None:
    assert references_problem({"clusters": [{"name": "lab"}],
                               "join_tokens": [{"cluster": "lab"}]}) is None
    assert references_problem({"clusters": [], "join_tokens": [{"cluster": "lab"}]}) == \
        "row 1 of its member tables/join_tokens.jsonl: its cluster 'lab' is not in the archive"
