"""StateItem actions (one module each) and the runner that applies a phase's items in order.

Items act on the machine under a root directory: / in production, a temp tree in tests (like
Host's root). Files and downloads land under it and commands run in it. Every path an item
names is resolved inside the root (`..` and symbolic links included) and refused, naming it,
when it would leave it: a link never takes a write or a read out of the root.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def read_left_file(root: Path, path: str, limit: int, what: str) -> str:
    """The text of a file an item left for its report (a kubeconfig, an output), at most limit
    bytes since a report carries no more; ItemFailed starting with `what` when it can't. The
    file is opened without following a link put in its place since it was resolved."""
    try:
        fd = os.open(resolved_path(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except ItemFailed as exc:
        raise ItemFailed(f"{what}: {exc}") from None
    except OSError as exc:
        raise ItemFailed(f"{what}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ItemFailed(f"{what}: more than the {limit} bytes a report carries")
    return data.decode(errors="replace")
