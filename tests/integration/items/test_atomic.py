"""The one atomic-write helper behind item files, downloads and the journal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nodeagent.atomic import atomic_file, atomic_write
from tests.support.items import leftovers
from tests.support.requirements import require_root

pytestmark = pytest.mark.integration


def test_a_write_creates_missing_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c" / "file"
    atomic_write(target, b"data", mode=0o640)
    assert target.read_bytes() == b"data"
    assert target.stat().st_mode & 0o7777 == 0o640


def test_an_error_midway_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("writer failed")
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


async def test_cancellation_midway_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")
    writing = asyncio.Event()

    async def slow_writer() -> None:
        with atomic_file(target) as handle:
            handle.write(b"partial")
            writing.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(slow_writer())
    await writing.wait()
    assert len(leftovers(tmp_path)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path: Path) -> None:
    name = "file[1].conf"  # glob metacharacters are taken literally
    (tmp_path / f".{name}.k3j4h5.nodeagent-tmp").write_bytes(b"left by a killed writer")
    unrelated = [".file1.conf.k3j4h5.nodeagent-tmp", ".other.k3j4h5.nodeagent-tmp"]
    for other in unrelated:
        (tmp_path / other).write_bytes(b"belongs to another path")
    atomic_write(tmp_path / name, b"new")
    assert leftovers(tmp_path) == unrelated


def test_owner_is_set_before_the_file_appears(tmp_path: Path) -> None:
    require_root()
    atomic_write(tmp_path / "file", b"x", owner=(65534, 65534))
    stat = (tmp_path / "file").stat()
    assert (stat.st_uid, stat.st_gid) == (65534, 65534)
