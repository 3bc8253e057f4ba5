"""The artifact store's one rule, for both ports that serve it: a name opens a regular file
inside the store, never anything outside it (`..`, absolute names, symbolic links out)."""

from __future__ import annotations

import errno
from pathlib import Path

from coordinator.domain.errors import NotFound
from nodeagent.wire.validation import InvalidDocument, Problem


def locate(store: Path, name: str) -> Path:
    """The file `name` stands for in store; NotFound when there is none inside it."""
    if not name.isprintable():  # a NUL is no file name the OS takes
        raise InvalidDocument([Problem("name", "an artifact name has no control characters")])
    root = store.resolve()
    try:
        target = (root / name).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            raise NotFound(f"no artifact {name}")
    except OSError as exc:  # what is_file does not answer False for
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidDocument([Problem("name", "too long for a file name (a part of at "
                                           "most 255 bytes)")]) from None
        raise NotFound(f"no artifact {name}") from None
    return target
