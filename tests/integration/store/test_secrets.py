"""Machines' secrets at rest, on every backend: never in the clear in the database, opened by
every store (replica) that has the key, and a store with another key refused before it
reads or writes anything."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

import pytest

from coordinator.store.base import Store
from coordinator.store.cipher import Cipher, SecretsKeyError
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from tests.support.builders import SECRETS, full_machine, with_secrets


async def stored_documents(store: Store) -> list[str]:
    """The machines' documents as the database holds them."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            return [doc for (doc,) in conn.execute("SELECT doc FROM machines")]
    assert isinstance(store, PostgresStore)
    return await store.db.all(lambda row: str(row["doc"]), "SELECT doc FROM machines")


async def test_no_secret_is_stored_in_the_clear(store: Store) -> None:
    await store.commit([with_secrets(full_machine("m-1")), full_machine("m-2")])
    documents = await stored_documents(store)
    assert len(documents) == 2
    assert not [secret for secret in SECRETS if any(secret in doc for doc in documents)]
    assert await store.get_machine("m-1") == with_secrets(full_machine("m-1"))


async def test_a_replica_with_the_same_key_opens_what_another_sealed(
        store: Store, make_store: Callable[..., Store]) -> None:
    await store.commit([with_secrets(full_machine("m-1"))])
    replica = make_store()
    await replica.open()
    try:
        assert await replica.list_machines() == [with_secrets(full_machine("m-1"))]
        changed = with_secrets(full_machine("m-1", generation=9))
        await replica.commit([changed])
        assert await store.get_machine("m-1") == changed
    finally:
        await replica.close()


async def test_a_store_with_another_key_is_refused_when_it_opens(
        store: Store, make_store: Callable[..., Store]) -> None:
    """Before it could seal what the others cannot open, or fail on each machine it reads."""
    await store.commit([full_machine("m-1")])  # nothing sealed yet: the key is recorded anyway
    stranger = make_store(Cipher(Cipher.new_key(), "/var/lib/coordinator/secrets.key"))
    with pytest.raises(SecretsKeyError, match=re.escape(
            "/var/lib/coordinator/secrets.key is not the key this database's secrets are "
            "sealed with")):
        await stranger.open()
