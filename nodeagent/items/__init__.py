"""StateItem actions (one module each) and the runner that applies a phase's items in order.

Items act on the machine under a root directory: / in production, a temp tree in tests (like
Host's root). Files and downloads land under it and commands run in it. Every path an item
names is resolved inside the root (`..` and symbolic links included) and refused, naming it,
when it would leave it: a link never takes a write or a read out of the root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from nodeagent.items.outcome import ItemFailed


def _inside(root: Path, path: str, resolved: str) -> Path:
    """resolved as a Path, when it is root or under it (both with links resolved)."""
    base = os.path.realpath(root)
    if resolved != base and not resolved.startswith(base.rstrip("/") + "/"):
        raise ItemFailed(f"{path} is outside the agent's root {root} (it resolves to "
                         f"{resolved}): an item's paths stay under it")
    return Path(resolved)


def machine_path(root: Path, path: str) -> Path:
    """Where a file an item writes lives under root (a relative path is taken from root):
    `..` and links in its directories resolved, its last component not, since a write
    replaces a link there rather than writing through it. ItemFailed when that leaves root."""
    head, name = os.path.split(os.path.join(os.path.realpath(root), path.lstrip("/")))
    if name in ("", ".", ".."):
        raise ItemFailed(f"{path} names a directory, not a file")
    return _inside(root, path, os.path.join(os.path.realpath(head), name))


def resolved_path(root: Path, path: str) -> Path:
    """An existing place under root an item names (a command's cwd, a file it left), every
    link in it resolved; ItemFailed when that leaves root."""
    return _inside(root, path, os.path.realpath(os.path.join(os.path.realpath(root),
                                                             path.lstrip("/"))))


@contextlib.contextmanager
def directory_of(root: Path, path: str, target: Path, create: bool = False) -> Iterator[int]:
    """A descriptor of the directory of target (path as machine_path or resolved_path gave
    it), reached from root one directory at a time without following a link, made on the way
    with create: a link put in place of one of them since path was resolved ends the walk
    instead of leading out of root."""
    base = os.path.realpath(root)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in target.parent.relative_to(base).parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                    os.fsync(fd)  # the new directory survives a crash
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                        os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise ItemFailed(f"{path}: {part} became a symbolic link while it was "
                                     "resolved: refused") from None
                raise
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def open_left_file(root: Path, path: str, what: str) -> BinaryIO:
    """A file an item left for the coordinator (a kubeconfig, an output, an etcd snapshot),
    opened to read; ItemFailed starting with `what` when it can't. The file and its
    directories are opened without following a link put in their place since it was
    resolved."""
    try:
        target = resolved_path(root, path)
        if str(target) == os.path.realpath(root):
            raise ItemFailed(f"{path} is the agent's root, a directory")
        with directory_of(root, path, target) as directory:
            fd = os.open(target.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=directory)
        return os.fdopen(fd, "rb")
    except ItemFailed as exc:
        raise ItemFailed(f"{what}: {exc}") from None
    except OSError as exc:
        raise ItemFailed(f"{what}: cannot read it: {exc.strerror or exc}") from None


def read_left_file(root: Path, path: str, limit: int, what: str) -> str:
    """The text of a file an item left for its report (a kubeconfig, an output), at most limit
    bytes since a report carries no more; ItemFailed starting with `what` when it can't."""
    with open_left_file(root, path, what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:  # a directory reads as EISDIR
            raise ItemFailed(f"{what}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ItemFailed(f"{what}: more than the {limit} bytes a report carries")
    return data.decode(errors="replace")
