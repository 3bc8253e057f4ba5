"""A `store` fixture per backend: every behaviour test runs against each of them.

A PostgreSQL store joins by adding its id to BACKENDS and a branch to make_store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from coordinator.store.base import Store
from coordinator.store.sqlite import SQLiteStore

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """Makes unopened stores that all see the same database: reopening shows durability."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "coordinator.db")
    raise AssertionError(f"unknown backend {request.param}")


@pytest.fixture
async def store(make_store: Callable[[], Store]) -> AsyncIterator[Store]:
    opened = make_store()
    await opened.open()
    yield opened
    await opened.close()

