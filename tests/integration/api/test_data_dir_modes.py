"""The data dir stays private whatever the umask it is made under (outside systemd, a shell's
022): the directory and the pki 0700, every file the coordinator writes 0600 (the database
and its -wal and -shm, the admin token, keys and certificates, the secrets key); a data dir an
older coordinator left open to others is tightened at start, saying so, and nothing else in it
is touched."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.server.init import initialize
from coordinator.server.serve import ServeOptions, open_coordinator
from tests.support.harness import running_coordinator


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A shell's usual umask, for this process and what it starts."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def open_to_others(data: Path) -> dict[str, str]:
    """Each path of the data dir (the operator's artifacts aside) that is not private: a
    directory not 0700, a file not 0600, with its mode."""
    found = {}
    for path in [data, *data.rglob("*")]:
        if "artifacts" in path.relative_to(data).parts:
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            found[str(path.relative_to(data))] = f"{mode:04o}"
    return found


def wal_files(data: Path) -> list[str]:
    return sorted(p.name for p in data.glob("coordinator.db-*"))


def test_init_and_serve_under_a_022_umask_write_nothing_others_may_read(
        tmp_path: Path, loose_umask: None) -> None:
    with running_coordinator(tmp_path) as served:  # init, serve, a cluster applied
        served.admin.request("POST", "/v1/clusters/lab/join-tokens", body={"ttl": "1h"})
        assert wal_files(served.data) == ["coordinator.db-shm", "coordinator.db-wal"]
        assert open_to_others(served.data) == {}


async def test_the_files_are_private_in_process_too_whatever_the_umask(
        tmp_path: Path, loose_umask: None) -> None:
    """Not only through the commands' umask: each file is made private as it is created."""
    options = ServeOptions(tmp_path / "data")
    await initialize(options, ["127.0.0.1"], None, None, None)
    coordinator = await open_coordinator(options)
    try:
        assert wal_files(options.data_dir) == ["coordinator.db-shm", "coordinator.db-wal"]
        assert open_to_others(options.data_dir) == {}
    finally:
        await coordinator.store.close()


async def test_a_data_dir_left_open_to_others_is_tightened_at_start_and_logged(
        tmp_path: Path, loose_umask: None, caplog: pytest.LogCaptureFixture) -> None:
    options = ServeOptions(tmp_path / "data")
    await initialize(options, ["127.0.0.1"], None, None, None)
    data = options.data_dir
    loosened = ["", "pki", "coordinator.db", "admin.token", "pki/ca.crt", "pki/server.key"]
    for name in loosened:
        (data / name).chmod(0o755 if (data / name).is_dir() else 0o644)
    (data / "notes.txt").write_text("not the coordinator's\n")  # left as it is
    (data / "notes.txt").chmod(0o644)
    caplog.set_level(logging.WARNING, logger="coordinator.server.datadir")
    coordinator = await open_coordinator(options)
    await coordinator.store.close()
    assert open_to_others(data) == {"notes.txt": "0644"}
    assert sorted(r.getMessage() for r in caplog.records) == sorted(
        f"{data / name if name else data} had mode "
        f"{'0755' if (data / name).is_dir() else '0644'}, open to others: tightened to "
        f"{'0700' if (data / name).is_dir() else '0600'}" for name in loosened)
