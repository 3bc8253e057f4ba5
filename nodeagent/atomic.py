"""Crash-safe file replacement: a reader sees the old file or the new one, never a torn one,
and once a write returns it survives power loss. Used for item files, downloads, the journal
and the daemon's identity.

The agent is the only writer of the paths it manages, one write at a time per path, so a
temp file left by an earlier writer that was killed mid-write is garbage and is removed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_TEMP_SUFFIX = ".nodeagent-tmp"


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in directory durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """mkdir -p whose new directories survive a crash: each new entry's parent is fsynced."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir()
        fsync_dir(new.parent)


def _remove_stale_temps(directory: int, name: str) -> None:
    prefix = f".{name}."
    for entry in os.scandir(directory):
        if entry.name.startswith(prefix) and entry.name.endswith(_TEMP_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=directory)


def _new_temp(directory: int, name: str) -> tuple[str, int]:
    """A new temp file's name in directory and its descriptor, open for writing (0600)."""
    while True:
        temp = f".{name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        try:
            return temp, os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600, dir_fd=directory)
        except FileExistsError:
            continue


@contextlib.contextmanager
def opened_dir(directory: Path) -> Iterator[int]:
    """A descriptor of directory, closed on leaving."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(
    path: Path, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> Iterator[BinaryIO]:
    """Write through the yielded handle; when the block ends without error the file replaces
    path with mode and owner (uid, gid) already set, data and directory entry fsynced.
    On error (or cancellation) nothing at path changes and the temp file is removed."""
    make_dirs(path.parent)
    with opened_dir(path.parent) as directory, \
            atomic_file_in(directory, path.name, mode, owner) as handle:
        yield handle


@contextlib.contextmanager
def atomic_file_in(
    directory: int, name: str, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> Iterator[BinaryIO]:
    """atomic_file for the entry name of the directory open as `directory`: every step
    (temp file, rename, sync) in that very directory, whatever its path leads to meanwhile."""
    _remove_stale_temps(directory, name)
    temp, fd = _new_temp(directory, name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if owner is not None:
                os.fchown(handle.fileno(), *owner)
            os.fsync(handle.fileno())
        os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=directory)
        raise
    os.fsync(directory)


def atomic_write(
    path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    with atomic_file(path, mode, owner) as handle:
        handle.write(data)
