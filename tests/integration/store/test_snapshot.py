"""Store.export and Store.import_, which backups, restores and pivots stand on: a snapshot of
either backend imported into an empty store of either backend reads back the same, a store
holding state is never merged into, and a snapshot taken while commits go on holds whole
commits only."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sqlite3
import stat
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from coordinator.domain.changes import Change
from coordinator.domain.records import Event
from coordinator.server import pki
from coordinator.service import snapshot as snapshot_mod
from coordinator.store.base import Store, StoreError
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from tests.integration.store.conftest import BACKENDS
from tests.integration.store.samples import LISTED_QUERIES
from tests.integration.store.test_store import used
from tests.support.builders import (
    ONE_ITEM,
    SECRETS,
    TEST_CIPHER,
    cluster,
    full_machine,
    with_secrets,
)


@pytest.fixture(params=BACKENDS)
def empty_dsn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where an empty store of each backend lives: a SQLite file or a PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "restored.db")
        return
    with request.getfixturevalue("postgres").database() as dsn:
        yield dsn


@pytest.fixture
async def empty(empty_dsn: str) -> AsyncIterator[Store]:
    store: Store = (PostgresStore(empty_dsn, cipher=TEST_CIPHER)
                    if empty_dsn.startswith("postgresql://") else
                    SQLiteStore(empty_dsn, TEST_CIPHER))
    await store.open()
    yield store
    await store.close()


def event(machine_id: str, kind: str = "state", time: float = 10.0) -> Event:
    return Event(time=time, cluster="edge", kind=kind, message=f"{kind} of {machine_id}",
                 machine=machine_id, hostname=f"host-{machine_id}", data={"n": 1.5, "k": [1]})


async def fill(store: Store) -> None:
    """Some of everything a coordinator keeps, each away from its defaults."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=100.0)
    await store.put_cluster(cluster(worker=ONE_ITEM, release="1.1.0"), now=101.0)  # generation 2
    gone = await store.put_cluster(cluster(worker=ONE_ITEM, name="gone"), now=100.0)
    await store.apply(Change(clusters=[replace(gone, deleting=True)]))
    await store.add_join_token("edge", "hash-open", 102.0, None, None)
    await store.add_join_token("edge", "hash-limited", 102.0, 9_000_000_000.0, 2)
    await used(store, "hash-limited", 103.0)
    revoked = await store.add_join_token("gone", "hash-revoked", 104, None, None)
    await store.revoke_join_token(revoked.id)
    await store.add_admin_token("hash-admin", "initial", "admin", 105.0)
    reader = await store.add_admin_token("hash-reader", "dashboard", "read-only", 106.0)
    await store.revoke_admin_token(reader.id)
    await store.commit(machines=[with_secrets(full_machine("m-1")),
                                 full_machine("m-2", labels={"zone": "a"}, ip=None),
                                 full_machine("m-3", cluster="gone")],
                       events=[event("m-1"), event("m-2", "item", 11.0)])
    await store.commit(removed={"m-3": 107.0}, events=[event("m-3", "removed", 12.0)])
    await store.touch_machines({"m-2": 200.5})


async def everything(store: Store) -> dict[str, Any]:
    """What a coordinator reads back, through the store's own reads."""
    return {
        "clusters": await store.list_clusters(),
        "join_tokens": await store.list_join_tokens(),
        "by_hash": [await store.join_token(h) for h in ("hash-open", "hash-limited")],
        "admin_tokens": await store.list_admin_tokens(),
        "admin": await store.admin_token("hash-admin"),
        "machines": await store.list_machines(),
        "owner": await store.credential_owner("cred-m-1"),
        "counts": sorted(await store.count_machines(), key=repr),
        "removed": await store.removed_machine("m-3"),
        "removed_credential": await store.removed_credential("cred-m-3"),
        "events": await store.list_events(limit=100),
        "pages": [await store.machine_page(query) for query in LISTED_QUERIES],
    }


async def test_a_snapshot_imported_into_an_empty_store_of_either_backend_reads_back_the_same(
        store: Store, empty: Store) -> None:
    await fill(store)
    snapshot = await store.export()
    json.dumps(snapshot)  # portable: plain JSON, whatever the backend
    await empty.import_(snapshot)
    assert await everything(empty) == await everything(store)
    assert (await empty.get_machine("m-1")) == with_secrets(full_machine("m-1"))
    assert await empty.machine_page(LISTED_QUERIES[0]) == (["m-2"], 1)  # by its label
    # Later events follow the imported ones; tokens keep working as they did.
    (later,) = await empty.commit(events=[event("m-1", "after", 20.0)])
    assert later.id == max(e.id for e in await store.list_events()) + 1
    assert await used(empty, "hash-limited", 110.0) == (
        replace((await store.join_token("hash-limited")), uses=2), True)  # type: ignore[arg-type]


async def test_an_import_mints_the_store_a_new_epoch(store: Store, empty: Store,
                                                     empty_dsn: str) -> None:
    """The snapshot's generations may be behind what its agents hold: under a new epoch, no
    agent's tag names them (domain/assignments/etags.py). Even a store that served machines before (its
    rows deleted by hand) gets one."""
    await empty.commit([full_machine("m-old")])
    served = await empty.machine_version("m-old")
    assert served is not None
    await _delete_rows(empty_dsn)
    await fill(store)
    await empty.import_(await store.export())
    source, imported = await store.machine_version("m-1"), await empty.machine_version("m-1")
    assert source is not None and imported is not None
    assert imported.generation == source.generation
    assert imported.epoch not in (source.epoch, served.epoch)


async def _delete_rows(dsn: str) -> None:
    """Every row of the state, not the store's bookkeeping: an operator emptying it by hand."""
    if dsn.startswith("postgresql://"):
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute("DELETE FROM machine_labels; DELETE FROM machines; "
                                     "DELETE FROM events")
        finally:
            await connection.close()
        return
    with contextlib.closing(sqlite3.connect(dsn)) as connection, connection:
        connection.executescript("DELETE FROM machine_labels; DELETE FROM machines; "
                                 "DELETE FROM events;")


async def test_secrets_stay_sealed_in_a_snapshot(store: Store) -> None:
    await fill(store)
    text = json.dumps(await store.export())
    assert not [secret for secret in SECRETS if secret in text]


async def test_a_store_holding_state_is_refused_with_nothing_written(
        store: Store, empty: Store) -> None:
    await fill(store)
    await empty.put_cluster(cluster(worker=ONE_ITEM, name="mine"), now=1.0)
    with pytest.raises(StoreError, match=r"already holds a coordinator's state \(rows in "
                                         r"clusters\): restore into an empty database"):
        await empty.import_(await store.export())
    assert [c.spec.name for c in await empty.list_clusters()] == ["mine"]
    assert await empty.list_machines() == [] and await empty.list_events() == []


async def test_an_export_while_commits_go_on_holds_whole_commits_only(store: Store) -> None:
    """Each commit writes a machine and its event together: a snapshot that read the tables
    at different moments would show events of machines it does not hold."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    writing = True
    committed = 0

    async def write() -> int:
        nonlocal committed
        while writing:
            n = committed + 1
            await store.commit(machines=[full_machine(f"m-{n:04d}")], events=[event(f"m-{n:04d}")])
            committed = n
        return committed

    writer = asyncio.create_task(write())
    snapshots = []
    deadline = time.monotonic() + 60  # a loaded machine interleaves fewer writes per export
    while len(snapshots) < 10 or committed <= 10 or len({len(s["machines"]) for s in snapshots}) < 2:
        assert time.monotonic() < deadline, "the writes never went on between the exports"
        snapshots.append(await store.export())
        await asyncio.sleep(0.01)  # a few writes between two snapshots
    writing = False
    written = await writer
    assert written > 10
    for snapshot in snapshots:
        machines = {row["id"] for row in snapshot["machines"]}
        assert machines == {row["machine"] for row in snapshot["events"]}
    assert len({len(s["machines"]) for s in snapshots}) > 1  # taken while the fleet grew


# -- a snapshot of the coordinator: the store and the data dir's identity files together --------

def identity(data_dir: Path) -> dict[str, bytes]:
    pki.create(pki.Pki(data_dir / "pki"), ["coordinator.test"])
    # the key the store's secrets are sealed with
    (data_dir / "secrets.key").write_bytes(base64.b64encode(bytes(range(32))) + b"\n")
    return {name: (data_dir / name).read_bytes() for name in snapshot_mod.DATA_FILES}


async def test_a_restored_coordinator_has_the_same_state_and_files_private(
        store: Store, empty: Store, tmp_path: Path) -> None:
    await fill(store)
    files = identity(tmp_path / "source")
    snapshot = snapshot_mod.from_bytes(snapshot_mod.to_bytes(
        await snapshot_mod.take(store, tmp_path / "source")))
    target = tmp_path / "target"
    await snapshot_mod.restore(empty, target, snapshot)
    assert await everything(empty) == await everything(store)
    assert {name: (target / name).read_bytes() for name in files} == files
    assert sorted(p.name for p in target.iterdir()) == ["pki", "secrets.key"]
    assert {stat.S_IMODE(p.stat().st_mode) for p in target.rglob("*")} == {0o600, 0o700}
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


async def test_a_restore_refused_writes_nothing(store: Store, empty: Store, tmp_path: Path) -> None:
    await fill(store)
    identity(tmp_path / "source")
    snapshot = await snapshot_mod.take(store, tmp_path / "source")
    # A data dir with another coordinator's files: neither they nor the store change.
    taken = tmp_path / "taken"
    (taken / "pki").mkdir(parents=True)
    (taken / "pki" / "ca.key").write_bytes(b"another CA")
    with pytest.raises(snapshot_mod.RestoreError, match=r"taken already holds a coordinator's "
                                                        r"files \(pki/ca.key\): restore into a "
                                                        "new, empty data dir"):
        await snapshot_mod.restore(empty, taken, snapshot)
    assert await empty.list_clusters() == []
    assert [p.name for p in taken.rglob("*")] == ["pki", "ca.key"]
    # A store that holds state: no file reaches the data dir.
    await empty.put_cluster(cluster(worker=ONE_ITEM, name="mine"), now=1.0)
    with pytest.raises(snapshot_mod.RestoreError, match="already holds a coordinator's state"):
        await snapshot_mod.restore(empty, tmp_path / "fresh", snapshot)
    assert list((tmp_path / "fresh").iterdir()) == []
