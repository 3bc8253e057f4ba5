"""Machines written before a migration, and what the migrated store must show of them."""

from __future__ import annotations

from coordinator.store.base import Store
from tests.support.builders import full_machine

# Written by a coordinator from before `responding` was a column, to migrate.
BEFORE_RESPONDING_COLUMN = (full_machine("m-1", responding=False),
                            full_machine("m-2", responding=True))


async def assert_responding_kept(store: Store) -> None:
    """After the migration, every reader of `responding` sees what the documents said."""
    assert sorted((c.responding, c.count) for c in await store.count_machines()) == [
        (False, 1), (True, 1)]
    owner = await store.credential_owner("cred-m-1")
    assert owner is not None and not owner.responding
    assert await store.get_machine("m-2") == BEFORE_RESPONDING_COLUMN[1]
