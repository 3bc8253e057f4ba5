"""StateItem actions (one module each) and the runner that applies a phase's items in order.

Items act on the machine under a root directory: / in production, a temp tree in tests (like
Host's root). Files and downloads land under it and commands run in it.
"""

from __future__ import annotations

from pathlib import Path


def machine_path(root: Path, path: str) -> Path:
    """Where a machine path lives under root; a relative path is taken from root."""
    return root / path.lstrip("/")
