"""Hostnames compared as Kubernetes compares node names, lowercased, through the API on each
store backend: a second machine whose name differs only in case is refused at registration,
naming the first, and every look-up by name (machines get, events, render, reissue, a deleted
machine's history) finds the machine whatever case it is asked in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.store.base import Store
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SQLiteStore
from nodeagent.wire import joinstring
from tests.support.builders import TEST_CIPHER, credential, registration
from tests.support.harness import InProcessCoordinator, in_process_coordinator


@pytest.fixture(params=["sqlite", "postgresql"])
async def env(request: pytest.FixtureRequest, tmp_path: Path
              ) -> AsyncIterator[InProcessCoordinator]:
    store: Store
    if request.param == "sqlite":
        store = SQLiteStore(tmp_path / "coordinator.db", TEST_CIPHER)
        async with in_process_coordinator(tmp_path, store=store) as running:
            yield running
        return
    with request.getfixturevalue("postgres").database() as dsn:
        store = PostgresStore(dsn, cipher=TEST_CIPHER)
        async with in_process_coordinator(tmp_path, store=store) as running:
            yield running


async def register(env: InProcessCoordinator, hostname: str, token: str, status: int) -> dict:
    return await env.call("POST", "/v1/agent/register", status,
                          headers={"Authorization": f"Bearer {token}"},
                          json={**registration(hostname, token), "credential": credential(hostname)})


async def test_a_name_differing_only_in_case_is_refused_and_every_look_up_ignores_case(
        env: InProcessCoordinator) -> None:
    pending = await env.register("w1")
    refused = await register(env, "W1", await env.join_token(), 409)
    assert refused["error"] == (
        f"W1 is already registered in lab by another agent (Pending, as w1, id "
        f"{pending['machine_id']}: Kubernetes node names are lowercase, so both would be one "
        "Node); delete it first to register anew")
    await env.call("DELETE", "/v1/machines/w1", 200)
    w1 = await env.register("w1")
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    refused = await register(env, "W1", await env.join_token(), 409)
    assert refused["error"].startswith("W1 is already a member of lab (")
    assert f", as w1, id {w1['machine_id']}: Kubernetes node names" in refused["error"]
    assert [m["hostname"] for m in await env.machines()] == ["w1"]

    assert (await env.call("GET", "/v1/machines/W1", 200))["id"] == w1["machine_id"]
    events = await env.call("GET", "/v1/events?machine=W1", 200)
    assert events and {e["machine"] for e in events} == {w1["machine_id"]}
    rendered = await env.call("GET", "/v1/clusters/lab/render?machine=W1", 200)
    assert [m["id"] for m in rendered["machines"]] == [w1["machine_id"]]

    # A reissue string binds the node, whatever case it spells its name in.
    reissued = await env.call("POST", "/v1/machines/W1/reissue", 201)
    token = joinstring.decode(reissued["join"]).token
    rejoined = await register(env, "W1", token, 201)
    assert rejoined["machine_id"] == w1["machine_id"]

    env.clock.now += 60  # deleted after the first
    await env.call("DELETE", "/v1/machines/w1?skipReset=true", 200)
    removed = await env.call("GET", "/v1/removed-machines?ref=W1", 200)
    assert [r["id"] for r in removed] == [w1["machine_id"], pending["machine_id"]]
    history = await env.call("GET", "/v1/events?machine=W1&kind=registered", 200)
    assert [e["machine"] for e in history] == [w1["machine_id"]]
