"""Store behaviour every backend must show, as the coordinator relies on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.changes import Change, Retarget, TokenUse
from coordinator.domain.machines.tokens import token_id
from coordinator.domain.model import POOL, MachineState
from coordinator.domain.records import (
    ClusterOutput,
    CredentialOwner,
    EtcdSnapshot,
    Event,
    JoinToken,
    MachineCount,
    RemovedMachine,
    StoredCluster,
)
from coordinator.store.base import Store, StoreError, TokenRefused
from tests.support.builders import ONE_ITEM, cluster, full_machine


def event(kind: str = "state", time: float = 10.0, cluster: str = "edge",
          machine_id: str | None = "m-1", **data: object) -> Event:
    return Event(time=time, cluster=cluster, kind=kind, message=f"{kind} happened",
                 machine=machine_id, hostname=machine_id and f"host-{machine_id}", data=dict(data))


# -- clusters ---------------------------------------------------------------------------


async def test_new_cluster_starts_at_generation_one(store: Store) -> None:
    stored = await store.put_cluster(cluster(worker=ONE_ITEM), now=100.0)
    assert (stored.generation, stored.created_at, stored.updated_at, stored.deleting) == \
        (1, 100.0, 100.0, False)
    assert await store.get_cluster("edge") == stored
    assert stored.spec == cluster(worker=ONE_ITEM)


async def test_applying_the_same_spec_again_keeps_the_generation(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=100.0)
    again = await store.put_cluster(cluster(worker=ONE_ITEM), now=200.0)
    assert (again.generation, again.created_at, again.updated_at) == (1, 100.0, 100.0)
    # Defaults spelled out are the same spec.
    assert (await store.put_cluster(cluster(worker=ONE_ITEM, workerBatchSize=50), now=300.0)).generation == 1


async def test_a_changed_spec_increments_the_generation(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=100.0)
    changed = await store.put_cluster(cluster(worker=ONE_ITEM, release="1.1.0"), now=200.0)
    assert (changed.generation, changed.created_at, changed.updated_at) == (2, 100.0, 200.0)
    assert changed.spec.release == "1.1.0"
    assert (await store.put_cluster(cluster(worker=ONE_ITEM, release="1.2.0"), now=300.0)).generation == 3
    stored = await store.get_cluster("edge")
    assert stored is not None and (stored.generation, stored.spec.release) == (3, "1.2.0")


async def test_clusters_are_listed_by_name_and_unknown_ones_are_none(store: Store) -> None:
    for name in ("west", "east", "north"):
        await store.put_cluster(cluster(worker=ONE_ITEM, name=name), now=1.0)
    assert [c.spec.name for c in await store.list_clusters()] == ["east", "north", "west"]
    assert await store.get_cluster("south") is None


async def test_marking_a_cluster_deleting_keeps_it_and_its_spec(store: Store) -> None:
    held = await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.apply(Change(clusters=[replace(held, deleting=True)]))  # `cluster delete`'s
    stored = await store.get_cluster("edge")
    assert stored is not None and stored.deleting and stored.spec == cluster(worker=ONE_ITEM)


async def test_removing_a_cluster_drops_it_and_its_join_tokens_but_not_history(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.put_cluster(cluster(worker=ONE_ITEM, name="other"), now=1.0)
    await store.add_join_token("edge", "hash-edge", 2.0, None, None)
    await store.add_join_token("other", "hash-other", 2.0, None, None)
    await store.commit(events=[event(machine_id=None)])
    await store.apply(Change(dropped=["edge"]))
    assert await store.get_cluster("edge") is None
    assert await used(store, "hash-edge", 3.0) == (None, False)
    assert [t.cluster for t in await store.list_join_tokens()] == ["other"]
    assert len(await store.list_events(cluster="edge")) == 1
    # The name is free again, starting over at generation 1.
    assert (await store.put_cluster(cluster(worker=ONE_ITEM, release="2.0.0"), now=3.0)).generation == 1


async def test_one_change_writes_clusters_target_machines_removals_and_events_together(
        store: Store) -> None:
    """Store.apply: what an operation decided, written as decided (the cluster's generation
    and deleting mark included), the events numbered in order."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.commit([full_machine("m-1"), full_machine("m-2")])
    new = StoredCluster(cluster(worker=ONE_ITEM, name="west"), 1, 5.0, 5.0)
    held = replace(await store.get_cluster("edge"), generation=7, updated_at=6.0,  # type: ignore[arg-type]
                   deleting=True)
    written = await store.apply(Change(
        clusters=[new, held], retarget=Retarget('{"urls": ["https://b:1"]}'),
        machines=[full_machine("m-1", generation=9)], removed={"m-2": 8.0},
        events=[event("a"), event("b")]))
    assert [c for c in await store.list_clusters()] == [held, new]
    assert await store.move_target() == '{"urls": ["https://b:1"]}'
    assert await store.list_machines() == [full_machine("m-1", generation=9)]
    assert await store.removed_machine("m-2") == RemovedMachine("m-2", "edge", "host-m-2", 8.0)
    assert [e.kind for e in written] == ["a", "b"] and written[0].id + 1 == written[1].id
    assert await store.list_events() == written
    await store.apply(Change(retarget=Retarget(None)))  # cleared, nothing else touched
    assert await store.move_target() is None and len(await store.list_clusters()) == 2


async def test_a_cluster_with_machines_cannot_be_removed(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.commit([full_machine()])
    with pytest.raises(StoreError, match="still has 1 machines"):
        await store.apply(Change(dropped=["edge"]))
    assert await store.get_cluster("edge") is not None


async def test_a_cluster_keeps_its_outputs_sealed_past_its_machines_never_replaced(
        store: Store) -> None:
    """What a manager's item produced, kept for the cluster: through the removal of that
    manager and a reopening; a second value for a name is never written over the first, even
    from another pass (a replica's); gone with the cluster. Sealed: the database holds no
    value in the clear."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.put_cluster(cluster(worker=ONE_ITEM, name="other"), now=1.0)
    m1 = full_machine("m-1", outputs={"init.caCertHash": "sha256:first"})
    await store.commit([m1])
    kept = {"init.caCertHash": ClusterOutput("sha256:first", "m-1", "m1", 2.0)}
    await store.commit(removed={"m-1": 3.0}, outputs={"edge": kept})
    await store.commit(outputs={"edge": {
        "init.caCertHash": ClusterOutput("sha256:other", "m-2", "m2", 4.0),
        "init.endpoint": ClusterOutput("10.0.0.2:6443", "m-2", "m2", 4.0)}})
    edge = await store.get_cluster("edge")
    assert edge is not None and edge.outputs == {
        **kept, "init.endpoint": ClusterOutput("10.0.0.2:6443", "m-2", "m2", 4.0)}
    assert {c.spec.name: c.outputs for c in await store.list_clusters()} == {
        "edge": edge.outputs, "other": {}}
    rows = (await store.export())["cluster_outputs"]
    assert [(r["cluster"], r["name"], r["hostname"]) for r in rows] == [
        ("edge", "init.caCertHash", "m1"), ("edge", "init.endpoint", "m2")]
    assert "sha256:first" not in repr(rows) and "10.0.0.2" not in repr(rows)
    await store.apply(Change(dropped=["edge"]))
    await store.put_cluster(cluster(worker=ONE_ITEM), now=5.0)
    assert (await store.get_cluster("edge")).outputs == {}  # type: ignore[union-attr]


async def test_etcd_snapshots_are_kept_sealed_in_chunks_listed_once_complete_and_dropped(
        store: Store) -> None:
    """Chunks read back in place and unsealed; a snapshot incomplete is listed nowhere but
    found for the sweep; a backup's export carries the newest complete one of each cluster
    and its chunks, sealed; one dropped goes with its chunks; all go with their cluster."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.put_cluster(cluster(worker=ONE_ITEM, name="other"), now=1.0)

    def snapshot(snapshot_id: str, taken_at: float, name: str = "edge") -> EtcdSnapshot:
        return EtcdSnapshot(snapshot_id, name, "m-1", "m1", "etcd-snapshot", "upgrade", "m1",
                            "1.0", taken_at)

    for snapshot_id, taken_at, name in (("s-1", 2.0, "edge"), ("s-2", 3.0, "edge"),
                                        ("s-3", 4.0, "edge"), ("o-1", 2.0, "other")):
        await store.begin_etcd_snapshot(snapshot(snapshot_id, taken_at, name))
        await store.add_etcd_snapshot_chunk(snapshot_id, 0, b"etcd-" + snapshot_id.encode())
        await store.add_etcd_snapshot_chunk(snapshot_id, 1, b"\x00tail")
        if snapshot_id != "s-3":  # still arriving
            await store.complete_etcd_snapshot(snapshot_id, 10, "ab" * 32)
    assert [s.id for s in await store.etcd_snapshots("edge")] == ["s-2", "s-1"]
    assert (await store.etcd_snapshots("edge"))[0] == replace(
        snapshot("s-2", 3.0), size=10, sha256="ab" * 32, complete=True)
    assert [await store.etcd_snapshot_chunk("s-2", n) for n in range(3)] == [
        b"etcd-s-2", b"\x00tail", None]
    assert (await store.etcd_snapshot("s-3")).complete is False  # type: ignore[union-attr]
    assert await store.incomplete_etcd_snapshots(5.0) == ["s-3"]
    assert await store.incomplete_etcd_snapshots(4.0) == []
    exported = await store.export()
    assert sorted(r["id"] for r in exported["etcd_snapshots"]) == ["o-1", "s-2"]
    assert sorted((r["snapshot"], r["seq"]) for r in exported["etcd_snapshot_chunks"]) == [
        ("o-1", 0), ("o-1", 1), ("s-2", 0), ("s-2", 1)]
    assert "etcd-s-2" not in repr(exported)
    await store.drop_etcd_snapshot("s-2")
    assert [s.id for s in await store.etcd_snapshots("edge")] == ["s-1"]
    assert await store.etcd_snapshot_chunk("s-2", 0) is None
    await store.apply(Change(dropped=["edge"]))
    assert await store.etcd_snapshot("s-1") is None and await store.etcd_snapshot("s-3") is None
    assert await store.etcd_snapshot_chunk("s-1", 0) is None
    assert [s.id for s in await store.etcd_snapshots("other")] == ["o-1"]


# -- join tokens --------------------------------------------------------------------------


async def used(store: Store, token_hash: str, now: float) -> tuple[JoinToken | None, bool]:
    """A registration's use of the token (Change.token_use) in a change of its own: the token
    as it is afterwards (None when unknown), and whether the use counted (TokenRefused: not,
    and nothing of the change written)."""
    try:
        await store.apply(Change(token_use=TokenUse(token_hash, now)))
    except TokenRefused:
        return await store.join_token(token_hash), False
    return await store.join_token(token_hash), True



async def test_join_tokens_lead_to_their_cluster_and_count_their_uses(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    first = await store.add_join_token("edge", "hash-1", 2.0, None, None)
    await store.add_join_token("edge", "hash-2", 2.0, None, None)
    token, counted = await used(store, "hash-1", 3.0)
    assert counted and token is not None and (token.cluster, token.uses) == ("edge", 1)
    assert token.id == first.id == token_id("hash-1")
    assert [t.id for t in await store.list_join_tokens("edge")] == [first.id, token_id("hash-2")]
    assert await used(store, "unknown", 3.0) == (None, False)


async def test_a_pool_join_token_names_no_cluster_approves_and_outlives_a_dropped_cluster(
        store: Store) -> None:
    """A token into the pool (model.POOL: no cluster, which the foreign key lets through, and
    whether it approves), listed with the pool's, counted like any; a cluster dropped leaves it."""
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.add_join_token("edge", "hash-edge", 2.0, None, None)
    pool = await store.add_join_token(POOL, "hash-pool", 3.0, None, 2, auto_approve=True)
    token, counted = await used(store, "hash-pool", 4.0)
    assert counted and token is not None
    assert (token.cluster, token.auto_approve, token.uses) == (POOL, True, 1)
    assert [t.id for t in await store.list_join_tokens(POOL)] == [pool.id]
    assert [(t.cluster, t.auto_approve) for t in await store.list_join_tokens()] == [
        ("edge", False), (POOL, True)]
    await store.apply(Change(dropped=["edge"]))
    assert [t.id for t in await store.list_join_tokens()] == [pool.id]


async def test_a_join_token_is_refused_once_expired_used_up_or_revoked(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.add_join_token("edge", "expiring", 2.0, 10.0, None)
    await store.add_join_token("edge", "twice", 2.0, None, 2)
    revoked = await store.add_join_token("edge", "revoked", 2.0, None, None)
    assert (await used(store, "expiring", 9.9))[1]
    assert not (await used(store, "expiring", 10.0))[1]
    assert [(await used(store, "twice", 3.0))[1] for _ in range(3)] == [True, True, False]
    assert (await used(store, "twice", 3.0))[0].uses == 2  # type: ignore[union-attr]
    assert (await store.revoke_join_token(revoked.id)).revoked  # type: ignore[union-attr]
    token, counted = await used(store, "revoked", 3.0)
    assert not counted and token is not None and token.revoked and token.uses == 0
    assert await store.revoke_join_token("no-such-id") is None


async def test_concurrent_registrations_never_exceed_a_use_limit(store: Store) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    await store.add_join_token("edge", "limited", 2.0, None, 5)
    results = await asyncio.gather(*(used(store, "limited", 3.0) for _ in range(20)))
    assert sum(counted for _, counted in results) == 5


async def test_a_join_token_needs_an_existing_cluster(store: Store) -> None:
    with pytest.raises(StoreError):
        await store.add_join_token("nowhere", "hash-1", 2.0, None, None)
    assert await store.list_join_tokens() == []


async def test_admin_tokens_keep_their_role_and_can_be_revoked(store: Store) -> None:
    admin = await store.add_admin_token("hash-a", "ops", "admin", 1.0)
    reader = await store.add_admin_token("hash-r", "dashboard", "read-only", 2.0)
    assert await store.admin_token("hash-r") == reader
    assert await store.list_admin_tokens() == [admin, reader]
    assert (await store.revoke_admin_token(admin.id)).revoked  # type: ignore[union-attr]
    assert (await store.admin_token("hash-a")).revoked  # type: ignore[union-attr]
    assert await store.admin_token("unknown") is None


# -- machines -------------------------------------------------------------------------------


async def test_a_machine_round_trips_with_every_field(store: Store) -> None:
    m = full_machine()
    await store.commit([m])
    assert await store.get_machine("m-1") == m
    assert await store.list_machines() == [m]
    assert await store.get_machine("m-2") is None


async def test_committing_a_machine_again_replaces_it(store: Store) -> None:
    await store.commit([full_machine()])
    updated = full_machine(state=MachineState.READY, progress=None, applied=frozenset(),
                      generation=5, credential_hash="rotated", last_seen=9.0)
    await store.commit([updated])
    assert await store.get_machine("m-1") == updated
    owner = await store.credential_owner("rotated")
    assert owner is not None and owner.machine_id == "m-1"
    assert await store.credential_owner("cred-m-1") is None
    version = await store.machine_version("m-1")
    assert version is not None and version.generation == 5
    assert await store.machine_version("m-unknown") is None


async def test_the_stores_epoch_is_its_own_and_kept_across_reopening(
        make_store: Callable[..., Store], store: Store) -> None:
    """What an agent's tag names beside its generation (domain/assignments/etags.py): the same for every
    coordinator opening this store, and for every machine in it."""
    await store.commit([full_machine("m-1"), full_machine("m-2")])
    first, second = await store.machine_version("m-1"), await store.machine_version("m-2")
    assert first is not None and second is not None and first.epoch == second.epoch != ""
    other = make_store()
    await other.open()
    try:
        assert await other.machine_version("m-1") == first
    finally:
        await other.close()


async def test_machines_are_listed_per_cluster_by_hostname(store: Store) -> None:
    await store.commit([full_machine("m-3", hostname="c"), full_machine("m-1", hostname="b"),
                        full_machine("m-2", hostname="a"),
                        full_machine("m-9", cluster="other", hostname="a")])
    assert [m.id for m in await store.list_machines("edge")] == ["m-2", "m-1", "m-3"]
    assert [m.id for m in await store.list_machines("other")] == ["m-9"]
    assert [m.id for m in await store.list_machines()] == ["m-2", "m-1", "m-3", "m-9"]
    assert await store.list_machines("none") == []


async def test_machines_are_counted_by_cluster_state_and_responding(store: Store) -> None:
    assert await store.count_machines() == []
    await store.commit([full_machine("m-1", responding=True), full_machine("m-2", responding=True),
                        full_machine("m-3"), full_machine("m-4", state=MachineState.READY, responding=True),
                        full_machine("m-9", cluster="other")])
    assert sorted(await store.count_machines(), key=lambda c: (c.cluster, c.state, c.responding)) == [
        MachineCount("edge", "Deploy", responding=False, count=1),
        MachineCount("edge", "Deploy", responding=True, count=2),
        MachineCount("edge", "Ready", responding=True, count=1),
        MachineCount("other", "Deploy", responding=False, count=1)]


async def test_a_machine_is_found_by_its_credential_hash(store: Store) -> None:
    await store.commit([full_machine("m-1"),
                        full_machine("m-2", credential_expires_at=99.5, responding=False),
                        full_machine("m-3", credential_hash="")])
    assert await store.credential_owner("cred-m-2") == CredentialOwner(
        machine_id="m-2", cluster="edge", hostname="host-m-2", expires_at=99.5, responding=False)
    assert await store.credential_owner("cred-m-1") == CredentialOwner(
        machine_id="m-1", cluster="edge", hostname="host-m-1", expires_at=None, responding=False)
    assert await store.credential_owner("cred-unknown") is None
    assert await store.credential_owner("") is None  # a machine without a credential


async def test_a_heartbeat_updates_last_seen_everywhere_the_machine_is_read(store: Store) -> None:
    await store.commit([full_machine(last_seen=3.5)])
    await store.touch_machine("m-1", now=50.0)
    expected = full_machine(last_seen=50.0)
    assert await store.get_machine("m-1") == expected
    assert await store.list_machines() == [expected]
    assert await store.list_machines("edge") == [expected]
    assert await store.get_machines(["m-1", "m-unknown"]) == [expected]


async def test_a_commit_of_a_machine_read_before_a_heartbeat_keeps_the_heartbeat(store: Store) -> None:
    await store.commit([full_machine(last_seen=3.5)])
    read = await store.get_machine("m-1")
    assert read is not None
    await store.touch_machine("m-1", now=50.0)
    await store.commit([replace(read, state=MachineState.READY)])
    assert await store.get_machine("m-1") == full_machine(last_seen=50.0, state=MachineState.READY)


async def test_a_heartbeat_for_a_removed_machine_is_ignored(store: Store) -> None:
    await store.touch_machine("gone", now=50.0)
    assert await store.list_machines() == []


async def test_batched_heartbeats_never_move_last_seen_back(store: Store) -> None:
    await store.commit([full_machine("m-1", last_seen=10.0), full_machine("m-2", last_seen=60.0)])
    await store.touch_machines({"m-1": 40.0, "m-2": 50.0, "gone": 70.0})
    assert {m.id: m.last_seen for m in await store.list_machines()} == {"m-1": 40.0, "m-2": 60.0}


async def test_machines_are_found_by_role_hostname_and_silence_without_listing_all(
        store: Store) -> None:
    await store.commit([full_machine("m-1", role="manager", last_seen=10.0),
                        full_machine("m-2", role="worker", last_seen=20.0),
                        full_machine("m-3", role=None, hostname="twin", last_seen=30.0),
                        full_machine("m-4", cluster="other", role="manager", hostname="twin")])
    assert [m.id for m in await store.list_machines("edge", role="manager")] == ["m-1"]
    assert [m.id for m in await store.list_machines(role="manager")] == ["m-1", "m-4"]
    assert [m.id for m in await store.machines_by_hostname("twin")] == ["m-3", "m-4"]
    assert [m.id for m in await store.machines_by_hostname("twin", "other")] == ["m-4"]
    # as Kubernetes compares node names, lowercased
    assert [m.id for m in await store.machines_by_hostname("TWIN")] == ["m-3", "m-4"]
    assert [m.id for m in await store.machines_by_hostname("Twin", "other")] == ["m-4"]
    assert await store.machines_by_hostname("nobody") == []
    assert sorted(await store.machines_last_seen_between("edge", 10.0, 30.0)) == ["m-1", "m-2"]
    assert await store.machines_last_seen_between("edge", 20.5, 30.0) == []
    assert sorted(m.id for m in await store.get_machines(["m-4", "m-2", "nope"])) == ["m-2", "m-4"]
    assert await store.get_machines([]) == []


# -- commit -----------------------------------------------------------------------------------


async def test_commit_writes_machines_removals_and_events_together(store: Store) -> None:
    await store.commit([full_machine("m-1"), full_machine("m-2")])
    stored = await store.commit(
        [full_machine("m-1", state=MachineState.READY)],
        [event("state", machine_id="m-1", to="Ready"), event("removed", machine_id="m-2")],
        removed={"m-2": 20.0},
    )
    assert await store.list_machines() == [full_machine("m-1", state=MachineState.READY)]
    assert [e.kind for e in stored] == ["state", "removed"]
    assert stored[0].id > 0 and stored[1].id > stored[0].id
    assert stored[0] == replace(event("state", machine_id="m-1", to="Ready"), id=stored[0].id)
    assert await store.list_events() == stored


async def test_a_removed_machine_is_remembered_by_its_id_and_its_last_credential(
        store: Store) -> None:
    """Its agent, back months later with the old credential, is told it was deleted."""
    await store.commit([full_machine("m-1"), full_machine("m-2", credential_hash="")])
    await store.commit(removed={"m-1": 20.0, "m-2": 21.0})
    gone = RemovedMachine("m-1", "edge", "host-m-1", 20.0)
    assert await store.removed_machine("m-1") == gone
    assert await store.removed_credential("cred-m-1") == gone
    assert await store.removed_machine("m-2") == RemovedMachine("m-2", "edge", "host-m-2", 21.0)
    assert await store.removed_credential("") is None  # a revoked credential proves nothing
    assert await store.removed_machine("m-3") is None
    assert await store.removed_credential("cred-m-3") is None
    # The same id and credential registered and removed again: the newest removal answers.
    await store.commit([full_machine("m-1")])
    assert await store.credential_owner("cred-m-1") is not None  # a live machine comes first
    await store.commit(removed={"m-1": 30.0})
    assert await store.removed_credential("cred-m-1") == replace(gone, removed_at=30.0)


async def test_removed_machines_are_found_by_hostname_the_last_removed_first(
        store: Store) -> None:
    """`machines logs HOST` of a machine deleted (twice, under two ids)."""
    await store.commit([full_machine("m-1", hostname="w1"), full_machine("m-2", hostname="w1"),
                        full_machine("m-3", hostname="w1", cluster="lab")])
    await store.commit(removed={"m-2": 20.0, "m-1": 30.0, "m-3": 25.0})
    assert [r.machine_id for r in await store.removed_by_hostname("w1")] == ["m-1", "m-3", "m-2"]
    assert [r.machine_id for r in await store.removed_by_hostname("w1", "edge")] == ["m-1", "m-2"]
    assert [r.machine_id for r in await store.removed_by_hostname("W1")] == ["m-1", "m-3", "m-2"]
    assert [r.machine_id for r in await store.removed_by_hostname("W1", "lab")] == ["m-3"]
    assert await store.removed_by_hostname("w2") == []


async def test_an_empty_commit_changes_nothing(store: Store) -> None:
    assert await store.commit() == []
    assert await store.list_machines() == [] and await store.list_events() == []


async def test_a_commit_failing_midway_writes_nothing(store: Store) -> None:
    """The event's data fails to encode after the machine and a first event were written."""
    before = full_machine("m-1")
    await store.commit([before])
    with pytest.raises(TypeError):
        await store.commit(
            [full_machine("m-1", state=MachineState.READY), full_machine("m-2")],
            [event("fine"), event("broken", payload=object())],
            removed={"m-1": 20.0},
        )
    assert await store.list_machines() == [before]
    assert await store.removed_machine("m-1") is None
    assert await store.list_events() == []
    # The store is still usable afterwards.
    assert len(await store.commit(events=[event()])) == 1


async def test_a_commit_failing_on_its_second_machine_writes_nothing(store: Store) -> None:
    with pytest.raises(TypeError):
        await store.commit([full_machine("m-1"), full_machine("m-2", facts={"x": {1, 2}})], [event()])
    assert await store.list_machines() == []
    assert await store.list_events() == []


# -- events -------------------------------------------------------------------------------------


async def test_events_round_trip_with_their_data(store: Store) -> None:
    sent = event("item", time=12.25, machine_id="m-1", attempt=2, output="line\n", exit_code=None,
                 nested={"a": [1, 2.5, True]})
    (stored,) = await store.commit(events=[sent])
    assert await store.list_events() == [stored]
    assert replace(stored, id=0) == sent


async def test_event_ids_strictly_increase_across_commits(store: Store) -> None:
    ids = [e.id for _ in range(3) for e in await store.commit(events=[event(), event()])]
    assert ids == sorted(ids) and len(set(ids)) == 6
    assert [e.id for e in await store.list_events()] == ids


async def test_events_are_filtered_by_cluster_machine_id_and_time(store: Store) -> None:
    stored = await store.commit(events=[
        event(time=1.0, cluster="edge", machine_id="m-1"),
        event(time=2.0, cluster="edge", machine_id="m-2"),
        event(time=3.0, cluster="other", machine_id="m-3"),
        event(time=4.0, cluster="edge", machine_id=None),
        event(time=5.0, cluster="edge", machine_id="m-1"),
    ])
    ids = [e.id for e in stored]

    async def listed(**filters: Any) -> list[int]:
        return [e.id for e in await store.list_events(**filters)]

    assert await listed() == ids
    assert await listed(cluster="edge") == [ids[0], ids[1], ids[3], ids[4]]
    assert await listed(machine="m-1") == [ids[0], ids[4]]
    assert await listed(cluster="other", machine="m-1") == []
    assert await listed(since_id=ids[1]) == ids[2:]
    assert await listed(since_time=3.0) == ids[2:]  # inclusive
    assert await listed(cluster="edge", since_time=2.0, since_id=ids[1]) == [ids[3], ids[4]]
    assert await listed(limit=2) == ids[:2]
    assert await listed(cluster="nowhere") == []


async def test_events_are_filtered_by_kind_in_the_query_not_after_the_limit(store: Store) -> None:
    stored = await store.commit(events=[event("item"), event("state"), event("item"),
                                        event("approved"), event("item", machine_id="m-2")])
    ids = [e.id for e in stored]

    async def listed(**filters: Any) -> list[int]:
        return [e.id for e in await store.list_events(**filters)]

    assert await listed(kinds=["item"]) == [ids[0], ids[2], ids[4]]
    assert await listed(kinds=["state", "approved"]) == [ids[1], ids[3]]
    assert await listed(kinds=["item"], machine="m-1", limit=1, since_id=ids[0]) == [ids[2]]
    assert await listed(kinds=[]) == []
    assert await listed(kinds=["nothing"]) == []


async def test_newest_first_gives_the_last_matches(store: Store) -> None:
    stored = await store.commit(events=[event("item", time=float(i)) for i in range(5)]
                                + [event("state")])
    ids = [e.id for e in stored]
    newest = await store.list_events(kinds=["item"], newest_first=True, limit=2)
    assert [e.id for e in newest] == [ids[4], ids[3]]
    assert [e.id for e in await store.list_events(newest_first=True, limit=1)] == [ids[5]]
    assert [e.id for e in await store.list_events(newest_first=True, since_id=ids[3])] == \
        [ids[5], ids[4]]


async def test_events_are_listed_in_id_order_even_when_times_are_not(store: Store) -> None:
    stored = await store.commit(events=[event(time=9.0), event(time=1.0), event(time=5.0)])
    assert await store.list_events() == stored


async def test_events_can_be_paged_with_the_last_id(store: Store) -> None:
    stored = await store.commit(events=[event(time=float(i)) for i in range(7)])
    pages, since = [], 0
    while page := await store.list_events(since_id=since, limit=3):
        pages.append([e.time for e in page])
        since = page[-1].id
    assert pages == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0]]
    assert since == stored[-1].id


async def test_events_beyond_the_retention_are_pruned_oldest_first_in_chunks(
        store: Store) -> None:
    """Older than the age kept, or beyond the count kept: gone, a chunk per call; the rest
    stays, and ids go on growing."""
    stored = await store.commit(events=[event(time=float(i)) for i in range(10)])
    ids = [e.id for e in stored]
    assert await store.prune_events(before=3.0, keep=100, chunk=2) == 2
    assert await store.prune_events(before=3.0, keep=100, chunk=2) == 1
    assert await store.prune_events(before=3.0, keep=100, chunk=2) == 0
    assert [e.id for e in await store.list_events()] == ids[3:]
    assert await store.prune_events(before=0.0, keep=4, chunk=100) == 3  # the count
    assert [e.id for e in await store.list_events()] == ids[6:]
    assert await store.prune_events(before=100.0, keep=4, chunk=100) == 4  # every one expired
    assert await store.list_events() == []
    assert await store.prune_events(before=100.0, keep=4, chunk=100) == 0
    (later,) = await store.commit(events=[event(time=200.0)])
    assert later.id > ids[-1]


# -- durability ---------------------------------------------------------------------------------


async def test_everything_survives_closing_and_reopening(store: Store,
                                                         make_store: Callable[[], Store]) -> None:
    await store.put_cluster(cluster(worker=ONE_ITEM), now=1.0)
    held = await store.put_cluster(cluster(worker=ONE_ITEM, release="2.0.0"), now=2.0)
    await store.add_join_token("edge", "hash-1", 3.0, None, None)
    await store.commit([full_machine("m-1"), full_machine("m-2")], [event(), event()],
                       removed={"m-2": 50.0})
    await store.touch_machine("m-1", now=60.0)
    await store.apply(Change(clusters=[replace(held, deleting=True)]))
    clusters, machines, events = (await store.list_clusters(), await store.list_machines(),
                                  await store.list_events())
    await store.close()

    reopened = make_store()
    await reopened.open()
    try:
        assert await reopened.list_clusters() == clusters
        assert clusters[0].generation == 2 and clusters[0].deleting
        assert await reopened.list_machines() == machines == [full_machine("m-1", last_seen=60.0)]
        assert await reopened.list_events() == events
        assert [t.cluster for t in await reopened.list_join_tokens()] == ["edge"]
        assert await reopened.removed_machine("m-2") == RemovedMachine("m-2", "edge", "host-m-2", 50.0)
        # Ids keep growing after a restart.
        (later,) = await reopened.commit(events=[event()])
        assert later.id > events[-1].id
    finally:
        await reopened.close()


async def test_a_closed_store_refuses_work(make_store: Callable[[], Store]) -> None:
    store = make_store()
    with pytest.raises(StoreError, match="not open"):
        await store.list_machines()
    await store.open()
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.commit(events=[event()])


async def test_the_move_target_is_one_row_replaced_cleared_and_durable(
        make_store: Callable[..., Store]) -> None:
    """PUT /v1/move-target's record (coordinator/service/movetargets.py), on either backend."""
    store = make_store()
    await store.open()
    try:
        assert await store.move_target() is None
        await store.set_move_target('{"urls": ["https://a:1"]}')
        await store.set_move_target('{"urls": ["https://b:1"]}')
        assert await store.move_target() == '{"urls": ["https://b:1"]}'
    finally:
        await store.close()
    reopened = make_store()
    await reopened.open()
    try:
        assert await reopened.move_target() == '{"urls": ["https://b:1"]}'
        await reopened.set_move_target(None)
        assert await reopened.move_target() is None
        await reopened.set_move_target(None)  # nothing to clear: no error
    finally:
        await reopened.close()
