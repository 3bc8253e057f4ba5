"""The coordinator's HTTP API in-process on a real SQLite store, with a clock tests move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.harness import InProcessCoordinator, in_process_coordinator


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[InProcessCoordinator]:
    async with in_process_coordinator(tmp_path) as running:
        yield running
