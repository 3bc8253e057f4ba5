"""A `store` fixture per backend: every behaviour test runs against each of them (PostgreSQL
in a fresh database of the session's server)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from coordinator.store.base import Store
from coordinator.store.cipher import Cipher
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import TEST_CIPHER

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Makes unopened stores that all see the same database: reopening shows durability. They
    seal secrets with TEST_CIPHER unless given another cipher."""
    if request.param == "sqlite":
        def sqlite(cipher: Cipher = TEST_CIPHER) -> Store:
            return SQLiteStore(tmp_path / "coordinator.db", cipher)

        yield sqlite
        return
    with request.getfixturevalue("postgres").database() as dsn:
        def postgres(cipher: Cipher = TEST_CIPHER) -> Store:
            return PostgresStore(dsn, cipher=cipher)

        yield postgres


@pytest.fixture
async def store(make_store: Callable[..., Store]) -> AsyncIterator[Store]:
    opened = make_store()
    await opened.open()
    yield opened
    await opened.close()

