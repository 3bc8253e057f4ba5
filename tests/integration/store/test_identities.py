"""The index of machines' product_uuids and MACs (machine_identities), on each backend: what
a registration looks up to find a cloned VM, kept with every commit, emptied with a removal,
and rebuilt from the documents by a snapshot's import."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator.domain.machines.clones import Holder
from coordinator.store.base import Store
from coordinator.store.sqlite import SQL, SQLiteStore
from tests.integration.store.test_snapshot import empty, empty_dsn  # noqa: F401 - fixtures
from tests.support.builders import TEST_CIPHER, full_machine

UUID = "4c4c4544-0042-3510-8052-b4c04f4e5032"


def identified(machine_id: str, uuid: str, *macs: str, ignored: bool = False) -> Any:
    """A machine whose last report carries its machine-identity check."""
    check = {"name": "machine-identity", "severity": "hard", "status": "pass", "message": "ok",
             "remedy": "", "duration": 0.0, "ignored": ignored,
             "data": {"product_uuid": uuid, "macs": list(macs)}}
    return replace(full_machine(machine_id), precheck={"checks": [check]})


async def test_a_shared_product_uuid_or_mac_names_the_machine_holding_it(store: Store) -> None:
    await store.commit([identified("m-1", UUID.upper(), "52:54:00:12:34:56", "52:54:00:aa:bb:cc"),
                        identified("m-2", "other-uuid-0", "52:54:00:99:99:99")])
    wanted = {("product_uuid", UUID), ("mac", "52:54:00:12:34:56"), ("mac", "52:54:00:00:00:01")}
    found = await store.identity_holders(wanted, excluding="m-3")
    assert sorted(found, key=repr) == [
        Holder("mac", "52:54:00:12:34:56", "m-1", "host-m-1", "edge"),
        Holder("product_uuid", UUID, "m-1", "host-m-1", "edge")]
    assert await store.identity_holders(wanted, excluding="m-1") == []  # not itself


async def test_the_index_follows_each_commit_and_removal(store: Store) -> None:
    await store.commit([identified("m-1", UUID, "52:54:00:12:34:56")])
    await store.commit([identified("m-1", "new-uuid-1", "52:54:00:12:34:57")])  # regenerated
    assert await store.identity_holders({("product_uuid", UUID)}, excluding="x") == []
    await store.commit([identified("m-1", UUID, "52:54:00:12:34:56", ignored=True)])
    assert await store.identity_holders({("product_uuid", UUID)}, excluding="x") == []
    await store.commit([identified("m-1", UUID)])
    await store.commit(removed={"m-1": 50.0})
    assert await store.identity_holders({("product_uuid", UUID)}, excluding="x") == []


async def test_an_import_rebuilds_the_index_from_the_documents(
        store: Store, empty: Store) -> None:  # noqa: F811 - the fixture
    await store.commit([identified("m-1", UUID.upper(), "52:54:00:12:34:56"),
                        identified("m-2", "skipped-uuid", "52:54:00:00:00:02", ignored=True)])
    await empty.import_(await store.export())
    found = await empty.identity_holders({("product_uuid", UUID), ("mac", "52:54:00:12:34:56"),
                                          ("mac", "52:54:00:00:00:02")}, excluding="x")
    assert sorted((h.kind, h.value, h.machine_id) for h in found) == [
        ("mac", "52:54:00:12:34:56", "m-1"), ("product_uuid", UUID, "m-1")]


async def test_sqlite_finds_holders_through_the_index_not_a_scan(tmp_path: Path) -> None:
    """A registration costs a look-up per value, whatever the fleet's size."""
    store = SQLiteStore(tmp_path / "c.db", TEST_CIPHER)
    await store.open()
    await store.close()
    with sqlite3.connect(tmp_path / "c.db") as conn:
        plan = " ".join(row[-1] for row in conn.execute(
            "EXPLAIN QUERY PLAN " + SQL.identity_holders, ("mac", "52:54:00:12:34:56", "x")))
    assert "USING COVERING INDEX machine_identities_value (kind=? AND value=?)" in plan, plan
    assert "SCAN" not in plan, plan
