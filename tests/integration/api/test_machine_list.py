"""GET /v1/machines over HTTP: a page of the machines the filters select, in the order asked,
with the count of all of them, and every bad query a 422 naming its parameter."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.model import MachineState
from tests.support.builders import full_machine
from tests.support.harness import InProcessCoordinator


async def fleet(env: InProcessCoordinator) -> None:
    """30 machines of cluster lab (w-00..w-29, two managers, every third Deploying and not
    responding, the even ones labelled zone=a) and one of cluster other."""
    machines = [full_machine(f"m-{n:02d}", cluster="lab", hostname=f"w-{n:02d}",
                             ip=f"10.1.0.{n}", role="manager" if n < 2 else "worker",
                             state=MachineState.DEPLOY if n % 3 == 0 else MachineState.READY,
                             responding=n % 3 != 0, labels={"zone": "a"} if n % 2 == 0 else {},
                             state_since=100.0 - n, material=None, minting=None)
                for n in range(30)]
    machines.append(replace(machines[5], id="x-1", cluster="other", hostname="gateway",
                            ip="192.0.2.1"))
    await env.store.commit(machines)


async def listed(env: InProcessCoordinator, query: str) -> dict[str, Any]:
    page: dict[str, Any] = await env.call("GET", f"/v1/machines?{query}", 200)
    return page


def names(page: dict[str, Any]) -> list[str]:
    return [m["hostname"] for m in page["machines"]]


@pytest.mark.parametrize(("query", "expected", "total"), [
    ("cluster=lab&limit=3", ["w-00", "w-01", "w-02"], 30),
    ("cluster=lab&state=Deploy&limit=2&offset=2", ["w-06", "w-09"], 10),
    ("role=manager", ["w-00", "w-01"], 2),
    ("cluster=lab&label=zone=a&responding=true&limit=3", ["w-02", "w-04", "w-08"], 10),
    ("q=192.0.2", ["gateway"], 1),
    ("q=W-2&sort=-hostname&limit=2", ["w-29", "w-28"], 10),
    ("sort=state_since&limit=2", ["w-29", "w-28"], 31),
    ("id=m-07&id=x-1&id=nobody", ["gateway", "w-07"], 2),
    ("cluster=lab&state=Ready,Deploy&sort=-state&limit=1", ["w-29"], 30),
    ("cluster=nowhere", [], 0),
    ("cluster=lab&offset=99999999999999999999", [], 30),  # past any database's integers
])
async def test_filters_sort_and_pages_are_applied_by_the_server(
        env: InProcessCoordinator, query: str, expected: list[str], total: int) -> None:
    await fleet(env)
    page = await listed(env, query)
    assert (names(page), page["total"]) == (expected, total)


async def test_pages_walk_the_whole_selection_once(env: InProcessCoordinator) -> None:
    await fleet(env)
    pages = [await listed(env, f"sort=-last_seen&limit=7&offset={o}") for o in range(0, 35, 7)]
    assert [(p["offset"], p["limit"], p["total"]) for p in pages] == [
        (o, 7, 31) for o in range(0, 35, 7)]
    ids = [m["id"] for p in pages for m in p["machines"]]
    assert len(ids) == len(set(ids)) == 31


async def test_a_page_shows_each_machine_as_the_machine_view_does(env: InProcessCoordinator) -> None:
    await fleet(env)
    (row,) = (await listed(env, "id=m-03"))["machines"]
    one = await env.call("GET", "/v1/machines/m-03", 200)
    assert {k: one[k] for k in row} == row
    assert row["state"] == "Deploy" and row["responding"] is False
    first = await listed(env, "")
    assert (len(first["machines"]), first["total"], first["offset"], first["limit"]) == (
        31, 31, 0, 100)


@pytest.mark.parametrize(("query", "field", "says"), [
    ("state=Deploying,Failed", "state", "unknown state Deploying, Failed"),
    ("role=admin", "role", "must be manager or worker"),
    ("responding=maybe", "responding", "must be true or false"),
    ("sort=memory", "sort", "must be one of hostname, state, role, cluster, ip, last_seen"),
    ("limit=0", "limit", "must be an integer from 1 to 1000"),
    ("limit=100000", "limit", "must be an integer from 1 to 1000"),
    ("offset=-5", "offset", "must be an integer from 0 up"),
    ("offset=1e3", "offset", "must be an integer from 0 up"),
    ("label==x", "label", "'=x': must be key=value"),
    ("hostname=w-01", "hostname", "unknown query parameter"),
    ("limit=5&limit=6", "limit", "given more than once"),
])
async def test_a_bad_query_is_a_422_naming_its_parameter(
        env: InProcessCoordinator, query: str, field: str, says: str) -> None:
    body = await env.call("GET", f"/v1/machines?{query}", 422)
    (problem,) = body["problems"]
    assert problem["path"] == field and problem["message"].startswith(says), problem
