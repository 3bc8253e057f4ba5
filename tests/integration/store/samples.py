"""Machines written before a migration, and what the migrated store must show of them."""

from __future__ import annotations

from coordinator.domain.model import Machine, MachineState
from coordinator.domain.views.machinelist import MachineQuery, listed, select
from coordinator.store.base import Store
from coordinator.store.codec import dumps, machine_to_doc
from tests.support.builders import full_machine

# Written by a coordinator from before `responding` was a column, to migrate.
BEFORE_RESPONDING_COLUMN = (full_machine("m-1", responding=False),
                            full_machine("m-2", responding=True))

# Written by a coordinator from before the listed fields were columns (ip, role, state_since,
# machine_labels), to migrate: GET /v1/machines must find them by each.
BEFORE_LISTED_COLUMNS = (
    full_machine("m-1", labels={"zone": "a", "gpu": ""}, role="manager", state_since=9.0),
    full_machine("m-2", labels={"zone": "b"}, ip="10.0.0.12", state=MachineState.READY),
    full_machine("m-3", cluster="lab", labels={}, ip=None, role=None, state_since=0.0,
                 responding=True))
LISTED_QUERIES = (MachineQuery(labels=(("zone", "a"),)), MachineQuery(labels=(("gpu", None),)),
                  MachineQuery(role="worker"), MachineQuery(sort="ip"),
                  MachineQuery(sort="state_since", descending=True), MachineQuery(search="10.0.0.1"),
                  MachineQuery(cluster="edge", states=frozenset({"Ready"})),
                  MachineQuery(responding=True))

# Registered before hostnames were compared lowercased, to migrate: two machines of one
# cluster whose names differ only in case, each found by either spelling once migrated.
BEFORE_LOWERCASED_HOSTNAMES = (full_machine("m-1", hostname="W1"),
                               full_machine("m-2", hostname="w1"))


def old_insert(machine: Machine, responding: bool) -> str:
    """The INSERT an older coordinator ran for machine, as SQL text both databases run; with
    the responding column where the schema had it."""
    values = [machine.id, machine.cluster, machine.hostname, machine.state.value,
              machine.credential_hash]
    quoted = ", ".join("'" + v.replace("'", "''") + "'"
                       for v in [*values, dumps(machine_to_doc(machine, None))])
    column, value = (", responding", f", {machine.responding}") if responding else ("", "")
    return (f"INSERT INTO machines (id, cluster, hostname, state, credential_hash, doc, last_seen"
            f"{column}) VALUES ({quoted}, {machine.last_seen}{value})")


async def assert_responding_kept(store: Store) -> None:
    """After the migration, every reader of `responding` sees what the documents said."""
    assert sorted((c.responding, c.count) for c in await store.count_machines()) == [
        (False, 1), (True, 1)]
    owner = await store.credential_owner("cred-m-1")
    assert owner is not None and not owner.responding
    assert await store.get_machine("m-2") == BEFORE_RESPONDING_COLUMN[1]


async def assert_listed_found(store: Store) -> None:
    """After the migration, each page is the one the rules choose from the machines."""
    for query in LISTED_QUERIES:
        page, total = select(query, [listed(m) for m in BEFORE_LISTED_COLUMNS])
        assert await store.machine_page(query) == ([m.id for m in page], total), query


async def assert_hostnames_found_lowercased(store: Store) -> None:
    """After the migration, both machines of BEFORE_LOWERCASED_HOSTNAMES answer either spelling
    (and an id names one), live and once removed."""
    for spelling in ("w1", "W1"):
        assert [m.id for m in await store.machines_by_hostname(spelling, "edge")] == ["m-1", "m-2"]
    await store.commit(removed={"m-1": 20.0})
    assert [r.machine_id for r in await store.removed_by_hostname("w1")] == ["m-1"]
