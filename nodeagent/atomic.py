"""Crash-safe file replacement: a reader sees the old file or the new one, never a torn one,
and once a write returns it survives power loss. Used for item files, downloads, the journal
and the daemon's identity.

The agent is the only writer of the paths it manages, one write at a time per path, so a
temp file left by an earlier writer that was killed mid-write is garbage and is removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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


def _remove_stale_temps(path: Path) -> None:
    prefix = f".{path.name}."
    for entry in os.scandir(path.parent):
        if entry.name.startswith(prefix) and entry.name.endswith(_TEMP_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


@contextlib.contextmanager
def atomic_file(
    path: Path, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> Iterator[BinaryIO]:
    """Write through the yielded handle; when the block ends without error the file replaces
    path with mode and owner (uid, gid) already set, data and directory entry fsynced.
    On error (or cancellation) nothing at path changes and the temp file is removed."""
    make_dirs(path.parent)
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if owner is not None:
                os.fchown(handle.fileno(), *owner)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write(
    path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> None:
    with atomic_file(path, mode, owner) as handle:
        handle.write(data)
