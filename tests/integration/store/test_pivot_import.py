"""A pivot's target imports the old coordinator's snapshot on either backend: once (the same
pivot again changes nothing), never over another state, keeping its own admin tokens and
sealing the machines' secrets (and the etcd snapshot's chunks) again with its own key."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from io import BytesIO
from pathlib import Path

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.records import ClusterOutput, EtcdSnapshot
from coordinator.service import snapshot
from coordinator.service.pivots import IMPORTED, import_archive
from coordinator.store.base import Store
from coordinator.store.cipher import Cipher
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from tests.integration.store.conftest import BACKENDS
from tests.support.builders import ONE_ITEM, cluster, full_machine, with_secrets

TARGET_CIPHER = Cipher(bytes(range(100, 132)), "the target's secrets key")
KEPT = {"init.caCertHash": ClusterOutput("sha256:kept", "m-1", "host-m-1", 3.0)}
ETCD_SNAPSHOT = EtcdSnapshot("s-1", "edge", "m-1", "host-m-1", "etcd-snapshot", "upgrade",
                             "host-m-1", "1.0.0", 4.0, 10, hashlib.sha256(b"etcd bytes").hexdigest(),
                             True)


@pytest.fixture(params=BACKENDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An empty store of each backend, with a secrets key of its own and its admin token."""
    if request.param == "sqlite":
        opened: Store = SQLiteStore(tmp_path / "target.db", TARGET_CIPHER)
        await opened.open()
        await opened.add_admin_token("hash-target", "initial", "admin", 1.0)
        yield opened
        await opened.close()
        return
    with request.getfixturevalue("postgres").database() as dsn:
        opened = PostgresStore(dsn, cipher=TARGET_CIPHER)
        await opened.open()
        await opened.add_admin_token("hash-target", "initial", "admin", 1.0)
        yield opened
        await opened.close()


async def archive(store: Store, data_dir: Path) -> bytes:
    """The old coordinator's snapshot (its secrets key tests.support.builders.TEST_CIPHER's)
    as the pivot sends it."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=100.0)
    await store.add_admin_token("hash-old", "initial", "admin", 101.0)
    await store.commit(machines=[with_secrets(full_machine("m-1")), full_machine("m-2")],
                       outputs={"edge": KEPT})
    await store.begin_etcd_snapshot(ETCD_SNAPSHOT)
    await store.add_etcd_snapshot_chunk(ETCD_SNAPSHOT.id, 0, b"etcd bytes")
    await store.complete_etcd_snapshot(ETCD_SNAPSHOT.id, ETCD_SNAPSHOT.size, ETCD_SNAPSHOT.sha256)
    data_dir.mkdir()
    (data_dir / "secrets.key").write_bytes(base64.b64encode(bytes(range(32))) + b"\n")
    return snapshot.to_bytes(await snapshot.take(store, data_dir))


async def test_the_target_imports_once_with_its_own_key_and_admin_tokens(
        store: Store, target: Store, tmp_path: Path) -> None:
    data = await archive(store, tmp_path / "old")
    assert await import_archive(target, TARGET_CIPHER, BytesIO(data), "pv-1", "https://old",
                                5.0) == ["m-1", "m-2"]
    # its secrets open with the target's key (sealed with the old one, they would not)
    assert await target.get_machine("m-1") == with_secrets(full_machine("m-1"))
    assert (await target.get_cluster("edge")).outputs == KEPT  # type: ignore[union-attr]
    assert await target.etcd_snapshots("edge") == [ETCD_SNAPSHOT]
    assert await target.etcd_snapshot_chunk(ETCD_SNAPSHOT.id, 0) == b"etcd bytes"
    assert [t.name for t in await target.list_admin_tokens()] == ["initial"]
    assert await target.admin_token("hash-old") is None
    assert await import_archive(target, TARGET_CIPHER, BytesIO(data), "pv-1", "https://old",
                                6.0) is None
    with pytest.raises(Conflict, match="already holds the state of pivot pv-1"):
        await import_archive(target, TARGET_CIPHER, BytesIO(data), "pv-2", "https://other", 7.0)
    (marker,) = await target.list_events(kinds=[IMPORTED])
    assert marker.data == {"pivot": "pv-1", "from": "https://old"}


async def test_a_target_holding_state_is_refused_with_nothing_written(
        store: Store, target: Store, tmp_path: Path) -> None:
    data = await archive(store, tmp_path / "old")
    await target.put_cluster(cluster(worker=ONE_ITEM, name="mine"), now=1.0)
    with pytest.raises(Conflict, match=r"already holds a coordinator's state \(rows in "
                                       r"clusters\)"):
        await import_archive(target, TARGET_CIPHER, BytesIO(data), "pv-1", "https://old", 5.0)
    assert [c.spec.name for c in await target.list_clusters()] == ["mine"]
    assert await target.list_machines() == [] and await target.list_events() == []
