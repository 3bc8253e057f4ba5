"""GET /v1/machines' page as each database answers it (Store.machine_page) equals the page the
rules spell in Python (machinelist.select) over random fleets and queries: the filters, the
order with its ties, the page and the total."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.domain.model import Machine, MachineState
from coordinator.domain.views.machinelist import ROLES, SORT_FIELDS, MachineQuery, listed, select
from coordinator.store.base import Store
from tests.support.builders import full_machine

STATES = [s.value for s in MachineState]
LABEL_KEYS, LABEL_VALUES = ["zone", "gpu", "rack"], ["", "a", "b"]
# Few values, so that filters match some machines and sorts meet ties.
TEXT = st.text(alphabet="abAB0.-", min_size=1, max_size=5)

machines = st.lists(st.builds(
    lambda n, cluster, hostname, ip, state, role, labels, responding, last_seen, state_since:
        full_machine(f"m-{n}", cluster, hostname=hostname, ip=ip, state=MachineState(state),
                     role=role, labels=labels, responding=responding, last_seen=last_seen,
                     state_since=state_since),
    st.integers(0, 10**6), st.sampled_from(["edge", "lab"]), TEXT,
    st.none() | st.sampled_from(["10.0.0.1", "10.0.0.12", "192.0.2.7", "fd00::a"]),
    st.sampled_from(STATES), st.none() | st.sampled_from(ROLES),
    st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES)),
    st.booleans(), st.sampled_from([0.0, 1.5, 100.0]), st.sampled_from([0.0, 2.5, 7.0])),
    max_size=25, unique_by=lambda m: m.id)

queries = st.builds(
    MachineQuery,
    cluster=st.none() | st.sampled_from(["edge", "lab", "none"]),
    states=st.frozensets(st.sampled_from(STATES), max_size=3),
    role=st.none() | st.sampled_from(ROLES),
    labels=st.lists(st.tuples(st.sampled_from(LABEL_KEYS),
                              st.none() | st.sampled_from(LABEL_VALUES)), max_size=2).map(tuple),
    search=st.sampled_from(["", "a", "b0", "-", ".", "10.0.0.1", "::"]),
    responding=st.none() | st.booleans(),
    ids=st.frozensets(st.integers(0, 10**6).map(lambda n: f"m-{n}"), max_size=3),
    sort=st.sampled_from(SORT_FIELDS), descending=st.booleans(),
    limit=st.integers(1, 30), offset=st.integers(0, 30))


def pure(query: MachineQuery, fleet: list[Machine]) -> tuple[list[str], int]:
    page, total = select(query, [listed(m) for m in fleet])
    return [m.id for m in page], total


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=machines, asked=st.lists(queries, min_size=1, max_size=4))
async def test_the_database_selects_orders_and_pages_as_the_rules_say(
        store: Store, fleet: list[Machine], asked: list[MachineQuery]) -> None:
    await store.commit(fleet)
    try:
        for query in asked:
            assert await store.machine_page(query) == pure(query, fleet), query
    finally:
        await store.commit(removed={m.id: 0.0 for m in fleet})


async def test_a_machine_relabelled_or_removed_is_found_by_its_labels_of_now(store: Store) -> None:
    zone_a = MachineQuery(labels=(("zone", "a"),))
    await store.commit([full_machine("m-1", labels={"zone": "a"}),
                        full_machine("m-2", labels={"zone": "a", "gpu": ""})])
    await store.commit([replace(full_machine("m-1"), labels={"zone": "b"})])
    assert await store.machine_page(zone_a) == (["m-2"], 1)
    await store.commit(removed={"m-2": 1.0})
    assert await store.machine_page(zone_a) == ([], 0)
    assert await store.machine_page(MachineQuery(labels=(("gpu", None),))) == ([], 0)
    assert await store.machine_page(MachineQuery(labels=(("zone", "b"),))) == (["m-1"], 1)


async def test_an_offset_past_the_databases_integers_is_an_empty_page(store: Store) -> None:
    await store.commit([full_machine("m-1")])
    assert await store.machine_page(MachineQuery(offset=10**20)) == ([], 1)
