"""The rules of GET /v1/machines: filters, order, pages, and the query's problems named."""

from __future__ import annotations

import pytest

from coordinator.domain.views.machinelist import (
    Listed,
    MachineQuery,
    parse_query,
    select,
)
from nodeagent.wire.validation import InvalidDocument


def row(n: int, **fields: object) -> Listed:
    values: dict[str, object] = {
        "id": f"m-{n:03d}", "cluster": "lab", "hostname": f"node-{n:03d}",
        "ip": f"10.0.{n // 256}.{n % 256}", "state": "Ready", "role": "worker", "labels": {},
        "responding": True, "last_seen": float(n), "state_since": float(-n)}
    values.update(fields)
    return Listed(**values)  # type: ignore[arg-type]


def hostnames(query: MachineQuery, machines: list[Listed]) -> list[str]:
    return [m.hostname for m in select(query, machines)[0]]


FLEET = [row(0, role="manager", labels={"zone": "a", "gpu": ""}),
         row(1, state="Deploy", labels={"zone": "b"}),
         row(2, state="Pending", role=None, ip=None, responding=False),
         row(3, cluster="edge", hostname="Edge-Gateway", ip="192.0.2.7", labels={"zone": "a"})]


@pytest.mark.parametrize(("pairs", "expected"), [
    ([], ["Edge-Gateway", "node-000", "node-001", "node-002"]),
    ([("cluster", "lab")], ["node-000", "node-001", "node-002"]),
    ([("state", "deploy,Pending")], ["node-001", "node-002"]),
    ([("role", "manager")], ["node-000"]),
    ([("label", "zone=a")], ["Edge-Gateway", "node-000"]),
    ([("label", "zone=a"), ("label", "gpu")], ["node-000"]),
    ([("label", "gpu=x")], []),
    ([("q", "EDGE")], ["Edge-Gateway"]),
    ([("q", "192.0.2")], ["Edge-Gateway"]),
    ([("q", "10.0.0.1")], ["node-001"]),
    ([("responding", "false")], ["node-002"]),
    ([("responding", "True")], ["Edge-Gateway", "node-000", "node-001"]),
    ([("id", "m-001"), ("id", "m-003")], ["Edge-Gateway", "node-001"]),
    ([("sort", "-hostname")], ["node-002", "node-001", "node-000", "Edge-Gateway"]),
    ([("sort", "state_since")], ["Edge-Gateway", "node-002", "node-001", "node-000"]),
    ([("sort", "role")], ["node-002", "node-000", "node-001", "Edge-Gateway"]),  # none first
    ([("sort", "ip"), ("limit", "2")], ["node-002", "node-000"]),  # no IP first
])
def test_each_filter_and_order_selects_what_it_says(pairs: list[tuple[str, str]],
                                                    expected: list[str]) -> None:
    assert hostnames(parse_query(pairs), FLEET) == expected


def test_pages_cover_the_selection_once_in_order_with_ties_broken_by_id() -> None:
    fleet = [row(n, state=("Ready", "Deploy")[n % 2]) for n in reversed(range(25))]
    pages = [select(parse_query([("sort", "-state"), ("limit", "10"), ("offset", str(o))]),
                    fleet) for o in (0, 10, 20, 30)]
    assert [total for _, total in pages] == [25] * 4
    ids = [m.id for page, _ in pages for m in page]
    assert [len(page) for page, _ in pages] == [10, 10, 5, 0]
    # Ready sorts after Deploy, so first when descending; within a state, ids descend too.
    assert ids == sorted((m.id for m in fleet if m.state == "Ready"), reverse=True) + sorted(
        (m.id for m in fleet if m.state == "Deploy"), reverse=True)


@pytest.mark.parametrize(("pairs", "field", "says"), [
    ([("state", "Deploying")], "state", "unknown state Deploying: a comma-separated list of "
     "Uninitialized, Pending, Prepare, Deploy, Ready, Upgrade, Reconfigure, Deleting"),
    ([("state", ",")], "state", "unknown state (none given)"),
    ([("role", "boss")], "role", "must be manager or worker"),
    ([("responding", "yes")], "responding", "must be true or false"),
    ([("sort", "memory")], "sort", "must be one of hostname, state, role, cluster, ip, "
     "last_seen, state_since"),
    ([("sort", "--hostname")], "sort", "must be one of"),
    ([("limit", "0")], "limit", "must be an integer from 1 to 1000"),
    ([("limit", "1001")], "limit", "must be an integer from 1 to 1000"),
    ([("limit", "ten")], "limit", "must be an integer from 1 to 1000"),
    ([("offset", "-1")], "offset", "must be an integer from 0 up"),
    ([("label", "=a")], "label", "'=a': must be key=value, or key"),
    ([("stat", "Ready")], "stat", "unknown query parameter: known are cluster, pool, state"),
    ([("sort", "ip"), ("sort", "state")], "sort", "given more than once"),
])
def test_a_bad_query_names_its_parameter_and_what_is_allowed(
        pairs: list[tuple[str, str]], field: str, says: str) -> None:
    with pytest.raises(InvalidDocument) as refused:
        parse_query(pairs)
    (problem,) = refused.value.problems
    assert (problem.path, problem.message[:len(says)]) == (field, says)


def test_every_problem_of_a_query_is_named_at_once() -> None:
    with pytest.raises(InvalidDocument) as refused:
        parse_query([("limit", "0"), ("offset", "x"), ("role", "x")])
    assert sorted(p.path for p in refused.value.problems) == ["limit", "offset", "role"]
