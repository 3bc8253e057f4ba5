"""No operation leaves a crash window between two writes (issue 34): each writes its whole
change in one transaction. The store fails part of the way through the transaction, as a
crash would (a trigger on the real database raises at the last machine's row), and the store
must hold the state from before, every table of it (or a crash at another row, where an
operation's last write is elsewhere); without the failure the same operation
writes the whole change. On SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from coordinator.service.coordinator import Coordinator
from coordinator.service.pivots import copy_views
from coordinator.store.base import Store, StoreError
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from nodeagent.wire.protocol import PrecheckReport, RegisterRequest
from tests.support.builders import ONE_ITEM, cluster, finish_phase, full_machine, precheck_report
from tests.support.harness import ManualClock

PIN = "sha256:" + "b" * 64
Row = tuple[str, str]  # a table, and the condition (on its OLD row) naming the row
LAST: Row = ("machines", "id = 'm-3'")  # the crash comes at it: the others are written by then


@pytest.fixture
async def coordinator(make_store: Callable[..., Store]) -> AsyncIterator[Coordinator]:
    store = make_store()
    await store.open()
    service = Coordinator(store, clock=ManualClock())
    try:
        await service.admin.apply_cluster(cluster(worker=ONE_ITEM))
        await store.commit([full_machine(f"m-{i}") for i in (1, 2, 3)])
        yield service
    finally:
        await service.close()
        await store.close()


async def crash_at(store: Store, at: Row, on: bool = True) -> None:
    """From now on (on) or no longer, a write of the row at (table, SQL condition on the row
    as written: OLD for an update or delete, NEW for an insert) fails its transaction."""
    table, where = at
    triggers = {"old": ("UPDATE", "DELETE"), "new": ("INSERT",)}
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        try:
            for row, ops in triggers.items():
                for op in ops:
                    conn.execute(f"DROP TRIGGER IF EXISTS crash_{op.lower()}")
                    if on:
                        conn.execute(f"CREATE TRIGGER crash_{op.lower()} BEFORE {op} ON {table} "
                                     f"WHEN {row}.{where} "
                                     "BEGIN SELECT RAISE(ABORT, 'crash'); END")
        finally:
            conn.close()
        return
    assert isinstance(store, PostgresStore)
    await store.db.execute(
        "CREATE OR REPLACE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'crash'; END $$")
    for row, ops in triggers.items():
        await store.db.execute(f"DROP TRIGGER IF EXISTS crash_{row} ON {table}")
        if on:
            await store.db.execute(f"CREATE TRIGGER crash_{row} BEFORE {' OR '.join(ops)} "
                                   f"ON {table} FOR EACH ROW WHEN ({row}.{where}) "
                                   "EXECUTE FUNCTION crash()")


async def state(store: Store) -> dict[str, Any]:
    """Every table of the store (a snapshot's), and the move target a snapshot leaves out."""
    return {**await store.export(), "move_target": await store.move_target()}


async def crashed_then_whole(coordinator: Coordinator, operation: Callable[[], Awaitable[Any]],
                             at: Row = LAST) -> dict[str, Any]:
    """Run operation with a crash at a row (the last machine's unless told): the store as
    before, every table. Then without it: the state it wrote, returned."""
    store = coordinator.store
    before = await state(store)
    await crash_at(store, at)
    with pytest.raises(StoreError, match="crash"):
        await operation()
    assert await state(store) == before, "half of the operation was written"
    await crash_at(store, at, on=False)
    await operation()
    return await state(store)


async def generations(store: Store) -> dict[str, int]:
    return {m.id: m.generation for m in await store.list_machines()}


async def test_a_move_target_and_the_generations_announcing_it_are_written_together(
        coordinator: Coordinator) -> None:
    before = await generations(coordinator.store)
    after = await crashed_then_whole(
        coordinator, lambda: coordinator.move_targets.set(["https://new:8443"], PIN))
    assert after["move_target"] is not None and "https://new:8443" in after["move_target"]
    assert await generations(coordinator.store) == {i: g + 1 for i, g in before.items()}
    # Cleared: the same.
    after = await crashed_then_whole(coordinator, coordinator.move_targets.clear)
    assert after["move_target"] is None
    assert await generations(coordinator.store) == {i: g + 2 for i, g in before.items()}


async def test_a_cluster_apply_writes_its_spec_with_every_machines_generation(
        coordinator: Coordinator) -> None:
    before = await generations(coordinator.store)
    after = await crashed_then_whole(
        coordinator, lambda: coordinator.admin.apply_cluster(cluster(worker=ONE_ITEM,
                                                                     release="2.0.0")))
    assert [(row["generation"]) for row in after["clusters"]] == [2]
    assert await generations(coordinator.store) == {i: g + 1 for i, g in before.items()}
    # An upgrade paused: the spec and its event in the same transaction.
    after = await crashed_then_whole(coordinator,
                                     lambda: coordinator.admin.set_paused("edge", True))
    assert [row["kind"] for row in after["events"]][-2:] == ["cluster-applied", "upgrade"]


async def test_a_cluster_is_marked_deleting_with_all_its_machines_leaving(
        coordinator: Coordinator) -> None:
    after = await crashed_then_whole(coordinator, lambda: coordinator.admin.delete_cluster("edge"))
    assert [bool(row["deleting"]) for row in after["clusters"]] == [True]
    assert [row["state"] for row in after["machines"]] == ["Deleting"] * 3


async def test_a_pivots_copy_is_refreshed_whole(coordinator: Coordinator) -> None:
    """The old coordinator's read-only copy (pivots.copy_views): the target's specs and
    machines written over it together."""
    spec = cluster(worker=ONE_ITEM, release="3.0.0")
    views = [{"id": m.id, "state": "Ready", "role": "worker", "labels": {"zone": "b"},
              "release": "3.0.0", "responding": True, "last_seen": 9.0, "state_since": 8.0}
             for m in await coordinator.store.list_machines()]
    after = await crashed_then_whole(coordinator, lambda: copy_views(
        coordinator.writes, [{"spec": spec.model_dump(mode="json", by_alias=True)}], views,
        10.0))
    assert [row["generation"] for row in after["clusters"]] == [2]
    assert [row["state"] for row in after["machines"]] == ["Ready"] * 3


async def test_a_deleted_clusters_last_machines_go_with_the_cluster(
        coordinator: Coordinator) -> None:
    """The reconcile pass that removes a deleted cluster's last machines removes the cluster
    and says so in the same transaction: a crash at the cluster's row leaves its machines
    too, and the pass run again removes them all."""
    await coordinator.admin.delete_cluster("edge")
    stored = await coordinator.store.get_cluster("edge")
    assert stored is not None
    await coordinator.store.commit([finish_phase(stored.spec, m)  # their reset items ran
                                    for m in await coordinator.store.list_machines()])
    after = await crashed_then_whole(coordinator, coordinator.reconciler.reconcile_once,
                                     at=("clusters", "name = 'edge'"))
    assert (after["clusters"], after["machines"]) == ([], [])
    assert [row["id"] for row in after["removed_machines"]] == ["m-1", "m-2", "m-3"]
    assert [row["kind"] for row in after["events"]][-1] == "cluster-removed"


async def test_a_registration_counts_its_join_tokens_use_with_its_machine(
        coordinator: Coordinator) -> None:
    """A join token's use is counted in the registration's transaction: a crash at the new
    machine's row costs the token no use (one of one here: the node could never join), and
    the registration sent again joins with it."""
    secret, _ = await coordinator.admin.create_join_token("edge", None, 1)
    request = RegisterRequest(join_token=secret, hostname="w9", ip="10.0.0.9",
                              precheck=PrecheckReport.model_validate(precheck_report("w9")))
    after = await crashed_then_whole(coordinator, lambda: coordinator.agents.register(request),
                                     at=("machines", "hostname = 'w9'"))
    assert [row["uses"] for row in after["join_tokens"]] == [1]
    assert "w9" in [row["hostname"] for row in after["machines"]]
