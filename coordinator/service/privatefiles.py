"""Files that hold secrets (a backup, an etcd snapshot), written as the data dir's are: mode
0600, atomically (the whole file or none of it at its path) and durably (fsynced, with its
directory)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def saving(path: Path) -> Iterator[BinaryIO]:
    """A file to write what will be at path once the block ends without an exception;
    nothing of it otherwise."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """A file created, renamed or removed in directory survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
