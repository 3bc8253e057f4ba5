"""Items are applied for real: commands run, files land in a temp root, downloads come from
a server on 127.0.0.1 (the helpers are in tests/support/items.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The machine root items write under."""
    path = tmp_path / "root"
    path.mkdir()
    return path
