"""StateItem actions (one module each) and the runner that applies a phase's items in order.

Items act on the machine under a root directory: / in production, a temp tree in tests (like
Host's root). Files and downloads land under it and commands run in it.
"""

from __future__ import annotations

from pathlib import Path

from nodeagent.items.outcome import ItemFailed


def machine_path(root: Path, path: str) -> Path:
    """Where a machine path lives under root; a relative path is taken from root."""
    return root / path.lstrip("/")


def read_left_file(root: Path, path: str, limit: int, what: str) -> str:
    """The text of a file an item left for its report (a kubeconfig, an output), at most limit
    bytes since a report carries no more; ItemFailed starting with `what` when it can't."""
    try:
        data = machine_path(root, path).read_bytes()
    except OSError as exc:
        raise ItemFailed(f"{what}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ItemFailed(f"{what}: {len(data)} bytes, more than the {limit} a report carries")
    return data.decode(errors="replace")
