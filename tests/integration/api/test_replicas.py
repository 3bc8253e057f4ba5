"""Two coordinator replicas in-process on one PostgreSQL database, each with its own API:
wake-ups cross between them, one leads, and a deposed leader's writes are refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.model import MachineState
from coordinator.store.base import Fenced, leader_epoch
from coordinator.store.postgres import PostgresStore
from coordinator.store.postgres_connections import LEADER_LOCK
from nodeagent.wire.protocol import StateItem
from tests.support.builders import API_CLUSTER, TEST_CIPHER
from tests.support.harness import COORDINATOR, InProcessCoordinator, in_process_coordinator
from tests.support.ports import free_port
from tests.support.postgres import Postgres, holder_of, terminate
from tests.support.scenarios import approved_workers
from tests.support.waiting import wait_until_async


@pytest.fixture
def dsn(postgres: Postgres) -> Iterator[str]:
    with postgres.database() as fresh:
        yield fresh


@pytest.fixture
async def replicas(dsn: str, tmp_path: Path) -> AsyncIterator[list[InProcessCoordinator]]:
    """Replicas a and b: each its own store connection pool, coordinator and HTTP server, and
    the one secrets key they share."""
    async with contextlib.AsyncExitStack() as stack:
        running = []
        for name in ("a", "b"):
            store = PostgresStore(dsn, cipher=TEST_CIPHER)
            store.identity = name
            running.append(await stack.enter_async_context(in_process_coordinator(
                tmp_path, API_CLUSTER if name == "a" else None, store)))
        yield running


async def test_a_change_through_one_replica_wakes_a_long_poll_parked_on_another(
        replicas: list[InProcessCoordinator]) -> None:
    a, b = replicas
    for env in replicas:
        await env.coordinator.leadership.share()
    agent = await a.register("w1")
    before = (await b.assignment(agent))["generation"]
    poll = asyncio.create_task(b.assignment(agent, after=before, wait=20))
    await b.parked(agent)
    assert not poll.done()
    sent = time.monotonic()
    await a.call("PUT", "/v1/clusters", 200, data=API_CLUSTER.replace('"1.0"', '"1.1"'))
    woken = await asyncio.wait_for(poll, 5)
    latency = time.monotonic() - sent
    assert woken["generation"] > before
    assert latency < 1.0, f"woken after {latency:.3f}s: not by the notification"


async def test_a_machine_written_through_one_replica_is_answered_anew_by_the_others_next_poll(
        replicas: list[InProcessCoordinator]) -> None:
    """Each replica keeps the version its polls compare tags with (service/versions.py): the
    ids another replica wrote, relayed, drop what it kept, so a poll that starts after the
    write, on the other replica, is answered at once rather than 304."""
    a, b = replicas
    for env in replicas:
        await env.coordinator.leadership.share()
    agent = await a.register("w1")
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    auth = {"Authorization": f"Bearer {agent['credential']}"}
    first = await b.client.get(path, headers=auth)
    held, tag = (await first.json())["generation"], first.headers["ETag"]

    async def poll() -> Any:
        return await b.client.get(f"{path}?after={held}&wait=0.05",
                                  headers={**auth, "If-None-Match": tag})

    assert (await poll()).status == 304  # b keeps the version
    await a.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    await a.coordinator.reconciler.reconcile_once()
    answered: list[str] = []

    async def answered_anew() -> bool:
        answer = await poll()
        if answer.status == 200:
            answered.append((await answer.json())["state"])
        return bool(answered)

    await wait_until_async(answered_anew, 5, "b answers the new assignment")
    assert answered == ["Prepare"]


async def test_one_replica_leads_and_the_other_takes_over_and_fences_it_when_it_loses_the_lock(
        postgres: Postgres, dsn: str, replicas: list[InProcessCoordinator]) -> None:
    async with contextlib.AsyncExitStack() as running:
        for env in replicas:
            await running.enter_async_context(env.background(tick=0.2))

        def leader() -> str:
            return postgres.psql("SELECT holder || ' ' || epoch FROM leader", dsn)

        await wait_until_async(lambda: leader() != " 0" and leader() != "", 5, "a leader")
        first, epoch = leader().split()
        old, new = (replicas[0], replicas[1]) if first == "a" else (replicas[1], replicas[0])

        # The standby replica serves the API, and what it is asked reaches the leader.
        w1 = await new.register("w1")
        await new.call("POST", f"/v1/machines/{w1['machine_id']}/approve", 200,
                       json={"role": "worker"})
        await new.wait_state("w1", "Prepare")

        terminate(postgres, holder_of(postgres, dsn, LEADER_LOCK))
        started = time.monotonic()
        await wait_until_async(lambda: leader().split()[0] != first, 5,
                               "the other replica leading")
        assert time.monotonic() - started < 3.0
        assert int(leader().split()[1]) == int(epoch) + 1

        # A write of the old term still on its way (a reconcile pass, a drain) is refused.
        machine = await old.store.get_machine(w1["machine_id"])
        assert machine is not None
        stale = leader_epoch.set(int(epoch))
        try:
            with pytest.raises(Fenced):
                await old.store.commit([replace(machine, state=MachineState.READY)])
        finally:
            leader_epoch.reset(stale)
        assert (await old.call("GET", "/v1/machines/w1", 200))["state"] == "Prepare"

        # The deposed replica still serves the API; the new leader rolls its machines on.
        w2 = await old.register("w2")
        await old.call("POST", f"/v1/machines/{w2['machine_id']}/approve", 200,
                       json={"role": "worker"})
        await old.wait_state("w2", "Prepare")


def test_serve_names_a_bad_or_unreachable_store_without_its_password(tmp_path: Path) -> None:
    def serve(store: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([COORDINATOR, "serve", "--data-dir", str(tmp_path), "--listen",
                               f"127.0.0.1:{free_port()}", "--insecure-http"],
                              env={**os.environ, "COORDINATOR_STORE": store},
                              capture_output=True, text=True, timeout=60, check=False)

    wrong = serve("mysql://db.example/coordinator")
    assert wrong.returncode == 2
    assert "--store" in wrong.stderr and "postgresql://" in wrong.stderr
    port = free_port()
    down = serve(f"postgresql://coordinator:s3cret@127.0.0.1:{port}/state")
    assert down.returncode == 2, down.stderr
    assert down.stderr.startswith(f"error: cannot open the store: postgresql://coordinator@"
                                  f"127.0.0.1:{port}/state: ")
    assert "s3cret" not in down.stderr and "Traceback" not in down.stderr


async def test_reports_through_both_replicas_at_once_are_all_recorded_and_a_bad_one_refused(
        dsn: str, replicas: list[InProcessCoordinator]) -> None:
    a, b = replicas
    agents, setup = await approved_workers(a, 16, admin=b)
    sends = [(a, b)[n % 2].report(agent, setup, "prepare", status)
             for n, agent in enumerate(agents) for status in ("running", "succeeded")]
    sends.append(b.report(agents[0], {**setup, "name": "ghost"}, "prepare", expect=409))
    answers = await asyncio.gather(*sends)
    assert answers[:-1] == [{"status": "recorded"}] * 32 and "ghost" in answers[-1]["error"]
    fresh = PostgresStore(dsn, cipher=TEST_CIPHER)
    await fresh.open()
    try:
        machines = await fresh.get_machines([agent["machine_id"] for agent in agents])
        events = await fresh.list_events(kinds=["item"])
    finally:
        await fresh.close()
    fingerprint = StateItem.model_validate(setup).fingerprint()
    assert len(machines) == 16 and all(fingerprint in m.applied for m in machines)
    assert len(events) == 32 and [e.id for e in events] == sorted({e.id for e in events})


async def test_a_status_kept_on_one_replica_follows_what_the_other_writes(
        replicas: list[InProcessCoordinator]) -> None:
    """Replica b keeps what its status is computed from between calls; machines registered,
    approved and moved on through replica a show in b's next status (the relay tells b which
    machines a wrote) as in one computed from scratch."""
    a, b = replicas
    for env in replicas:
        await env.coordinator.leadership.share()
    status = "/v1/clusters/lab/status?machines=false"

    def summary(answer: dict) -> tuple:
        return answer["counts"], [(s["name"], s["state"], s["message"]) for s in answer["stages"]]

    async def settled(expected: dict[str, int]) -> dict:
        await wait_until_async(lambda: _counts_of(b, status, expected), 5,
                               f"replica b's status to count {expected}")
        return await b.call("GET", status, 200)

    assert (await b.call("GET", status, 200))["counts"] == {}
    await approved_workers(a, 3)
    kept = await settled({"Prepare": 3})
    restarted = await a.call("GET", status, 200)  # a computed it from its own writes
    assert summary(kept) == summary(restarted)
    b.coordinator.queries.status.forget()  # b from scratch: the same
    assert summary(await b.call("GET", status, 200)) == summary(kept)
    await a.register("late")
    joined = await settled({"Prepare": 3, "Pending": 1})
    assert ("registered", "done", "4 registered") in summary(joined)[1]
    b.coordinator.queries.status.forget()
    assert summary(await b.call("GET", status, 200)) == summary(joined)


async def _counts_of(env: InProcessCoordinator, path: str, expected: dict[str, int]) -> bool:
    return (await env.call("GET", path, 200))["counts"] == expected
