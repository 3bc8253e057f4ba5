"""A hostile or damaged archive through both readers, `coordinator restore` and the pivot's
import (POST /v1/pivot/import): a decompression bomb, a member larger than declared or not
matching its checksum, and rows crafted to fit the checksums but not their tables. Each is
refused naming the member (and the row): restore exits 1 with one line and no data dir, the
import answers 422 and its store stays empty; neither process's memory grows with the bomb."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from coordinator.cli import main
from coordinator.cli.client import ClientError
from tests.support.archives import bomb, crafted, crafted_rows, manifest, repacked, rows
from tests.support.harness import COORDINATOR, ServedCoordinator, running_coordinator
from tests.support.memory import Run, peak_rss_mib, run_measured
from tests.support.postgres import Postgres

pytestmark = pytest.mark.integration

BOMB = 128 << 20  # zeros: a 128 KiB archive
GROWTH_MIB = 64  # what a refused bomb may add to either process's peak (it used to add BOMB)
MACHINES = "tables/machines.jsonl"
EVENTS = "tables/events.jsonl"


@pytest.fixture(scope="module")
def backup(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real backup: a cluster, a join token, a registered machine, their events."""
    tmp = tmp_path_factory.mktemp("source")
    with running_coordinator(tmp) as source:
        source.register("node-0")
        source.cli("backup", "--out", str(tmp / "backup.tgz"))
    return (tmp / "backup.tgz").read_bytes()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedCoordinator]:
    """A coordinator with no state, where a pivot's archive would be imported."""
    with running_coordinator(tmp_path_factory.mktemp("target"), cluster=None) as served:
        yield served


@pytest.fixture(scope="module")
def hostile(backup: bytes) -> dict[str, tuple[bytes, str]]:
    """Each hostile archive made of the backup, with what its refusal must say."""
    data = backup
    machine = rows(data, "machines")[0]
    cluster = rows(data, "clusters")[0]
    token = rows(data, "join_tokens")[0]
    event = rows(data, "events")[0]
    members = manifest(data)["members"]
    wrong_sum = {**members, MACHINES: {**members[MACHINES], "sha256": "0" * 64}}
    too_many = {**members, EVENTS: {**members[EVENTS], "size": 2 << 30}}
    row1 = "row 1 of its member "
    return {
        "event not an object": (crafted_rows(data, "events", [[1, 2]]),
                                f"{row1}{EVENTS}: it is a JSON array, not an object"),
        "secrets key not base64": (crafted(data, "files/secrets.key", b"not base64!\n"),
                                   "its member files/secrets.key is not a secrets key"),
        "CA certificate not PEM": (crafted(data, "files/pki/ca.crt", b"garbage\n"),
                                   "its member files/pki/ca.crt is not a PEM certificate"),
        "machine without its document": (
            crafted_rows(data, "machines", [{k: v for k, v in machine.items() if k != "doc"}]),
            f"{row1}{MACHINES}: it has no field doc"),
        "document not a machine's": (crafted_rows(data, "machines", [{**machine, "doc": "{}"}]),
                                     f"{row1}{MACHINES}: field doc is not a machine's"),
        "generation as text": (
            crafted_rows(data, "clusters", [{**cluster, "generation": "2"}]),
            f"{row1}tables/clusters.jsonl: field generation is text, not a 64-bit integer"),
        "spec not a spec": (crafted_rows(data, "clusters", [{**cluster, "spec": '{"a": 1}'}]),
                            f"{row1}tables/clusters.jsonl: field spec is not a cluster's spec"),
        "max uses a fraction": (
            crafted_rows(data, "join_tokens", [{**token, "max_uses": 1.5}]),
            f"{row1}tables/join_tokens.jsonl: field max_uses is number, not a 64-bit integer"),
        "responding as text": (
            crafted_rows(data, "machines", [{**machine, "responding": "yes"}]),
            f"{row1}{MACHINES}: field responding is text, not a boolean"),
        "event id beyond 64 bits": (
            crafted_rows(data, "events", [{**event, "id": 2**64}]),
            f"{row1}{EVENTS}: field id is integer, not a 64-bit integer"),
        "event nested too deep": (
            crafted(data, EVENTS, b"[" * 100_000 + b"\n"),
            f"{row1}{EVENTS}: it is not JSON (or nested too deep)"),
        "event data not an object": (
            crafted_rows(data, "events", [{**event, "data": "[]"}]),
            f"{row1}{EVENTS}: field data is text, not text holding a JSON object"),
        "labels not text": (
            crafted_rows(data, "machines", [{**machine, "doc": json.dumps(
                {**json.loads(machine["doc"]), "labels": {"zone": 1}})}]),
            f"{row1}{MACHINES}: field doc: its labels are not an object of text"),
        "machine twice": (crafted_rows(data, "machines", [machine, machine]),
                          f"row 2 of its member {MACHINES}: it repeats the id"),
        "checksum mismatch": (repacked(data, members=wrong_sum),
                              f"its member {MACHINES} does not match the manifest's checksum"),
        "bomb over the cap": (repacked(data, members=too_many),
                              "would unpack to 2048.0 MiB, more than the 1024.0 MiB this "
                              "coordinator reads"),
        "bomb the manifest lies about": (
            bomb(data, EVENTS, BOMB),
            f"its member {EVENTS} is larger than the {members[EVENTS]['size']} bytes its "
            "manifest declares"),
        "bomb the manifest declares": (bomb(data, EVENTS, BOMB, BOMB),
                                       f"{row1}{EVENTS}: it is longer than 16777216 bytes"),
    }


def restore(archive: Path, data_dir: Path) -> Run:
    return run_measured([COORDINATOR, "restore", str(archive), "--data-dir", str(data_dir)])


def test_a_hostile_archive_is_refused_by_restore_naming_the_member_and_writing_nothing(
        backup: bytes, hostile: dict[str, tuple[bytes, str]], tmp_path: Path) -> None:
    """The bombs by `coordinator restore` processes of their own, whose peak memory is
    measured beside a restore of the real backup; the crafted rows by the same command run in
    this process (its start is what costs)."""
    archives = {"good": tmp_path / "good.tgz"}
    archives["good"].write_bytes(backup)
    for name, (content, _) in hostile.items():
        archives[name] = tmp_path / f"{name.replace(' ', '-')}.tgz"
        archives[name].write_bytes(content)
    bombs = ["good", *(name for name in hostile if name.startswith("bomb"))]
    with ThreadPoolExecutor(len(bombs)) as pool:
        runs = dict(zip(bombs, pool.map(lambda name: restore(
            archives[name], tmp_path / f"into-{archives[name].stem}"), bombs), strict=True))
    restored = runs.pop("good")
    assert restored.returncode == 0, restored.stderr
    for name, (_, problem) in hostile.items():
        archive, target = archives[name], tmp_path / f"into-{archives[name].stem}"
        if name in runs:
            done = runs[name]
            assert done.returncode == 1, (name, done.stdout, done.stderr)
            assert done.peak_rss_mib < restored.peak_rss_mib + GROWTH_MIB, \
                (name, done.peak_rss_mib, restored.peak_rss_mib)
            stderr = done.stderr
        else:
            result = CliRunner().invoke(main, ["restore", str(archive), "--data-dir", str(target)])
            assert result.exit_code == 1 and isinstance(result.exception, SystemExit), \
                (name, result.output, result.exception)
            stderr = result.stderr
        assert stderr.startswith(f"error: {archive} ") and problem in stderr, (name, stderr)
        assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
        assert not target.exists(), name


def test_a_hostile_archive_is_refused_by_the_pivot_import_with_a_422_and_nothing_imported(
        backup: bytes, hostile: dict[str, tuple[bytes, str]], target: ServedCoordinator) -> None:
    assert target.process is not None
    before = peak_rss_mib(target.process.pid)
    path = "/v1/pivot/import?pivot=pv-1&from=https://old"
    for name, (content, problem) in hostile.items():
        with pytest.raises(ClientError) as refused:
            target.admin.request("POST", path, text=content, content_type="application/gzip")
        assert refused.value.status == 422, (name, refused.value)
        assert "the pivot's archive is damaged: " in str(refused.value) or \
            "the pivot's archive would unpack" in str(refused.value), (name, refused.value)
        assert problem in str(refused.value), (name, refused.value)
        assert target.admin.get("/v1/clusters") == [] and target.admin.all_machines() == []
    assert peak_rss_mib(target.process.pid) < before + GROWTH_MIB
    # The store took nothing: the real archive imports into it after all of them.
    assert target.admin.request("POST", path, text=backup,
                                content_type="application/gzip")["imported"] is True
    assert [m["hostname"] for m in target.admin.all_machines()] == ["node-0"]
    assert json.dumps(target.admin.get("/v1/clusters")).count('"lab"') >= 1


def test_a_restore_the_store_refuses_leaves_no_data_dir_behind(
        backup: bytes, tmp_path: Path, postgres: Postgres) -> None:
    """Refused by the store after the archive passed (a database that already holds a
    coordinator's state): the data dir the attempt made goes again."""
    archive = tmp_path / "good.tgz"
    archive.write_bytes(backup)
    with postgres.database() as dsn:
        def restore_into(data_dir: Path) -> Result:
            return CliRunner().invoke(main, ["restore", str(archive), "--data-dir",
                                             str(data_dir), "--store", dsn])

        assert restore_into(tmp_path / "first").exit_code == 0
        again = restore_into(tmp_path / "second")
        assert again.exit_code == 1 and isinstance(again.exception, SystemExit), again.output
        assert "already holds a coordinator's state" in again.stderr, again.stderr
        assert not (tmp_path / "second").exists()
