"""The coordinator's HTTP API against a real SQLite store, driven as agents and admins would."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.api.openapi import openapi_document
from coordinator.api.routes import ROUTES
from coordinator.service.groupcommit import GroupCommit
from coordinator.service.pivots import copy_views
from coordinator.service.reconciler import ROLLING_OUT_SECONDS
from coordinator.service.versions import VERSION_CACHE_SECONDS
from coordinator.store.sqlite import SQLiteStore
from nodeagent.client import CoordinatorClient, Held
from nodeagent.wire.endpoint import Endpoint
from nodeagent.wire.protocol import StateItem
from tests.support.builders import API_CLUSTER, registration
from tests.support.driver import Call
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.scenarios import approved_workers
from tests.support.waiting import wait_until_async


async def test_health_and_readiness_need_no_credential(env: InProcessCoordinator) -> None:
    assert await env.call("GET", "/healthz", 200, headers={}) == {"status": "ok"}
    assert await env.call("GET", "/readyz", 200, headers={}) == {"status": "ready"}


async def test_admin_endpoints_refuse_a_missing_or_wrong_token(env: InProcessCoordinator) -> None:
    await env.call("GET", "/v1/machines", 401, headers={})
    body = await env.call("GET", "/v1/machines", 401, headers={"Authorization": "Bearer nope"})
    assert body["error"] == "unknown or revoked admin token"


async def test_openapi_lists_exactly_the_served_routes(env: InProcessCoordinator) -> None:
    served = {(route.method.lower(), route.resource.canonical)
              for route in env.client.app.router.routes() if route.resource is not None}
    documented = {(method, path) for path, ops in openapi_document(ROUTES)["paths"].items()
                  for method in ops}
    assert documented == served
    fetched = await env.call("GET", "/openapi.json", 200, headers={})
    assert fetched["paths"].keys() == openapi_document(ROUTES)["paths"].keys()


async def test_invalid_cluster_names_every_problem_and_stores_nothing(env: InProcessCoordinator) -> None:
    bad = ("name: other\nrelease: '2'\nsettings: {workerBatchSize: 0}\nmachineTypes:\n"
           "  worker:\n    - {name: a, phase: deploy, action: {type: exec}}\n")
    body = await env.call("PUT", "/v1/clusters", 422, data=bad)
    paths = {(p["path"], p["line"]) for p in body["problems"]}
    assert ("settings.workerBatchSize", 3) in paths
    assert ("machineTypes.worker[0].action.argv", 6) in paths
    await env.call("GET", "/v1/clusters/other", 404)


async def test_applying_the_same_spec_twice_changes_nothing(env: InProcessCoordinator) -> None:
    again = await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER)
    assert again["changed"] is False and again["generation"] == 1


async def test_register_with_an_unknown_join_token_is_refused(env: InProcessCoordinator) -> None:
    answer = await env.call("POST", "/v1/agent/register", 401,
                            json=registration("x", "join_nope"), headers={})
    assert answer["error"] == "unknown join token"


async def test_a_machine_failing_hard_prechecks_is_visible_but_cannot_be_approved(
        env: InProcessCoordinator) -> None:
    await env.register("bad-node", failing=True)
    listed = await env.machines()
    assert listed[0]["precheck_failures"] == ["os: Plan 9 is not supported"]
    refused = await env.call("POST", "/v1/machines/bad-node/approve", 409, json={"role": "worker"})
    assert "Plan 9 is not supported" in refused["error"]


async def test_an_agent_cannot_read_or_report_for_another_machine(env: InProcessCoordinator) -> None:
    a = await env.register("node-a")
    b = await env.register("node-b")
    headers = {"Authorization": f"Bearer {a['credential']}"}
    await env.call("GET", f"/v1/agent/machines/{b['machine_id']}/assignment", 401, headers=headers)
    await env.call("POST", f"/v1/agent/machines/{b['machine_id']}/heartbeat", 401, headers=headers)


async def test_approval_moves_the_machine_to_prepare_and_wakes_its_long_poll(
        env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    first = await env.assignment(agent)
    assert first["state"] == "Pending" and first["items"] == []
    waiting = asyncio.create_task(env.assignment(agent, after=first["generation"], wait=20))
    await env.parked(agent)
    assert not waiting.done()
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    woken = await asyncio.wait_for(waiting, 5)  # long before the 20 s wait ran out
    assert woken["state"] == "Prepare"
    assert [i["name"] for i in woken["items"]] == ["setup"]
    assert woken["values"]["machine.hostname"] == "m1"


async def test_a_poll_that_waited_for_nothing_is_not_modified_for_the_agent_holding_it(
        env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    auth = {"Authorization": f"Bearer {agent['credential']}"}
    first = await env.client.get(path, headers=auth)
    held, tag = (await first.json())["generation"], first.headers["ETag"]
    assert re.fullmatch(rf'W/"[0-9a-f]{{16}}-{held}"', tag)  # the store's epoch, the generation

    def poll(after: int, tag: str | None, wait: float = 0.2) -> Any:
        headers = auth if tag is None else {**auth, "If-None-Match": tag}
        return env.client.get(f"{path}?after={after}&wait={wait}", headers=headers)

    timed_out = await poll(held, tag)
    assert timed_out.status == 304 and await timed_out.read() == b""
    assert timed_out.headers["ETag"] == tag
    # An agent from before epochs names the bare generation: not modified for it either.
    assert (await poll(held, f'W/"{held}"')).status == 304
    # An agent that names no tag (an older one) still gets the assignment again.
    again = await poll(held, None)
    assert again.status == 200 and (await again.json())["generation"] == held
    # A tag older than the machine's generation is answered at once, in full.
    stale = await poll(held - 1, tag.replace(f"-{held}", f"-{held - 1}"), wait=20)
    assert stale.status == 200 and (await stale.json())["generation"] == held

    # The agent's own client: nothing new is None; what changed arrives as before.
    client = CoordinatorClient([Endpoint(str(env.client.make_url("")))])
    holding = Held(held, tag)
    assert await client.assignment(agent["machine_id"], agent["credential"], holding,
                                   0.2) is None
    waiting = asyncio.create_task(
        client.assignment(agent["machine_id"], agent["credential"], holding, 20))
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    woken = await asyncio.wait_for(waiting, 5)
    assert woken is not None and woken[0]["state"] == "Prepare" and woken[1].generation > held


async def test_an_idle_agents_polls_read_nothing_and_a_write_is_answered_at_its_next_poll(
        env: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a poll compares the agent's tag with is kept between polls (service/versions.py):
    an idle fleet's polls cost the store no read. A write through the coordinator is answered
    at the next poll; one made behind its back (a tool on the database) once the kept version
    is VERSION_CACHE_SECONDS old."""
    agent = await env.register("m1")
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    auth = {"Authorization": f"Bearer {agent['credential']}"}
    first = await env.client.get(path, headers=auth)
    held, tag = (await first.json())["generation"], first.headers["ETag"]
    reads = 0
    read = env.store.machine_version

    async def counted(machine_id: str) -> Any:
        nonlocal reads
        reads += 1
        return await read(machine_id)

    monkeypatch.setattr(env.store, "machine_version", counted)

    async def poll() -> Any:
        return await env.client.get(f"{path}?after={held}&wait=0.05",
                                    headers={**auth, "If-None-Match": tag})

    assert [(await poll()).status for _ in range(5)] == [304] * 5
    assert reads <= 1, f"five idle polls read the machine's version {reads} times"

    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    approved = await poll()
    assert approved.status == 200 and (await approved.json())["state"] == "Prepare"
    held, tag = (await approved.json())["generation"], approved.headers["ETag"]
    assert (await poll()).status == 304

    machine = await env.store.get_machine(agent["machine_id"])
    assert machine is not None
    await env.store.commit([replace(machine, generation=machine.generation + 1)])
    assert (await poll()).status == 304  # kept: the coordinator was not told
    env.clock.now += VERSION_CACHE_SECONDS + 1
    behind_its_back = await poll()
    assert behind_its_back.status == 200
    assert (await behind_its_back.json())["generation"] == held + 1


async def test_a_version_read_while_its_machine_was_written_is_not_kept(
        env: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the store (awaited: PostgreSQL's is) that a write overtook holds what the
    write replaced: kept, it would answer the old tag 304 for VERSION_CACHE_SECONDS."""
    agent = await env.register("m1")
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    auth = {"Authorization": f"Bearer {agent['credential']}"}
    first = await env.client.get(path, headers=auth)
    held, tag = (await first.json())["generation"], first.headers["ETag"]
    reading, overtaken = asyncio.Event(), asyncio.Event()
    read = env.store.machine_version

    async def overtaken_read(machine_id: str) -> Any:
        version = await read(machine_id)
        reading.set()
        await overtaken.wait()
        return version

    monkeypatch.setattr(env.store, "machine_version", overtaken_read)
    env.clock.now += VERSION_CACHE_SECONDS + 1  # what the first poll kept is read again
    poll = asyncio.create_task(env.client.get(f"{path}?after={held}&wait=0.05",
                                              headers={**auth, "If-None-Match": tag}))
    await asyncio.wait_for(reading.wait(), 5)
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    overtaken.set()
    assert (await asyncio.wait_for(poll, 5)).status == 200  # woken by the write
    monkeypatch.setattr(env.store, "machine_version", read)
    again = await env.client.get(f"{path}?after={held}&wait=0.05",
                                 headers={**auth, "If-None-Match": tag})
    assert again.status == 200 and (await again.json())["state"] == "Prepare"


async def test_a_pivots_copy_refreshed_with_a_machines_new_state_answers_its_old_tag_at_once(
        env: InProcessCoordinator) -> None:
    """The old coordinator's read-only copy (pivots.copy_views) takes the target's state of a
    machine: a new generation, so that an agent falling back to the copy with the tag of what
    it said before is answered at once with what it says now, not told 304."""
    agent = await env.register("m1")
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    auth = {"Authorization": f"Bearer {agent['credential']}"}
    first = await env.client.get(path, headers=auth)
    held, tag = (await first.json())["generation"], first.headers["ETag"]
    view = await env.call("GET", "/v1/machines/m1", 200)
    await copy_views(env.coordinator.writes, [], [{**view, "state": "Ready", "role": "worker"}],
                     env.clock())
    answer = await asyncio.wait_for(env.client.get(
        f"{path}?after={held}&wait=20", headers={**auth, "If-None-Match": tag}), 5)
    assert answer.status == 200 and (await answer.json())["state"] == "Ready"
    assert answer.headers["ETag"] != tag


async def test_the_coordinator_is_rolling_out_while_its_passes_move_machines(
        env: InProcessCoordinator) -> None:
    """What the garbage collection schedule asks before pausing the process (gcpolicy)."""
    await env.register("m1")
    await env.coordinator.reconciler.reconcile_once()
    assert not env.coordinator.reconciler.rolling_out()  # a pass that moved nothing
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()  # Pending -> Prepare
    assert env.coordinator.reconciler.rolling_out()
    env.clock.now += ROLLING_OUT_SECONDS
    await env.coordinator.reconciler.reconcile_once()
    assert not env.coordinator.reconciler.rolling_out()


async def test_reports_drive_the_machine_to_ready(env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    await env.report_all(agent)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.assignment(agent))["state"] == "Deploy"
    await env.report_all(agent)
    await env.coordinator.reconciler.reconcile_once()
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert status["counts"] == {"Ready": 1}
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?machine=" + agent["machine_id"], 200)]
    assert kinds.count("state") == 3 and kinds.count("item") == 2


async def test_a_report_for_an_item_not_in_the_spec_is_refused(env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    body = await env.call(
        "POST", f"/v1/agent/machines/{agent['machine_id']}/reports", 409,
        headers={"Authorization": f"Bearer {agent['credential']}"},
        json={"item": "ghost", "fingerprint": "0" * 32, "phase": "deploy", "status": "succeeded",
              "attempt": 1, "started_at": 1.0})
    assert "ghost" in body["error"]


async def test_missed_heartbeats_mark_not_responding_without_changing_state(
        env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    env.clock.now += 31
    await env.coordinator.reconciler.reconcile_once()
    machine = (await env.call("GET", "/v1/machines/m1", 200))
    assert machine["responding"] is False and machine["state"] == "Pending"
    await env.heartbeat(agent)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.call("GET", "/v1/machines/m1", 200))["responding"] is True
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?cluster=lab", 200)]
    assert "not-responding" in kinds and "responding" in kinds


async def test_a_machine_that_goes_silent_between_passes_is_marked_and_answers_again(
        env: InProcessCoordinator) -> None:
    quiet = await env.register("quiet")
    chatty = await env.register("chatty")
    await env.coordinator.reconciler.reconcile_once()  # later passes only look at what changed
    for _ in range(4):
        env.clock.now += 10
        await env.heartbeat(chatty)
        await env.coordinator.reconciler.reconcile_once()
    machines = {m["hostname"]: m for m in await env.machines()}
    assert machines["quiet"]["responding"] is False and machines["chatty"]["responding"] is True
    await env.heartbeat(quiet)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.call("GET", "/v1/machines/quiet", 200))["responding"] is True
    assert (await env.call("GET", "/v1/machines/chatty", 200))["responding"] is True
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?machine=" + quiet["machine_id"], 200)]
    assert kinds.count("not-responding") == 1 and kinds.count("responding") == 1


async def test_a_pass_plans_on_a_reported_machine_with_the_heartbeats_written_since(
        env: InProcessCoordinator) -> None:
    """A pass takes the machines the coordinator just wrote as it wrote them, not read again:
    heartbeats written after the report must still count, or it would call the node silent."""
    agent = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    await env.report_all(agent)  # written, and kept for the next pass
    env.clock.now += 25
    await env.heartbeat(agent)
    await env.coordinator.heartbeats.flush()  # as the writer does every second
    env.clock.now += 10  # 35 s after the report, 10 s after the heartbeat
    await env.coordinator.reconciler.reconcile_once()
    machine = await env.call("GET", "/v1/machines/m1", 200)
    assert machine["responding"] is True and machine["state"] == "Deploy"
    kinds = [e["kind"] for e in await env.call("GET", "/v1/events?cluster=lab", 200)]
    assert "not-responding" not in kinds


async def test_an_agent_heard_from_before_it_went_silent_answers_again_at_its_next_heartbeat(
        env: InProcessCoordinator) -> None:
    """What authentication keeps of a credential follows the coordinator's own writes of the
    machine (here: marked not responding) instead of being read again."""
    agent = await env.register("m1")
    await env.heartbeat(agent)
    await env.coordinator.reconciler.reconcile_once()
    env.clock.now += 29
    # authenticated (neither a heartbeat nor a poll): kept for a while
    await env.send(Call("GET", "/v1/artifacts/none", 404, agent=agent))
    env.clock.now += 2
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.call("GET", "/v1/machines/m1", 200))["responding"] is False
    await env.heartbeat(agent)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.call("GET", "/v1/machines/m1", 200))["responding"] is True


async def test_a_poll_is_the_agents_heartbeat_and_an_old_agents_heartbeats_still_count(
        env: InProcessCoordinator) -> None:
    """An agent's long-poll counts as its heartbeat (nodeagent/wire/heartbeat.py): polls alone
    keep a machine responding, so the agent needs one connection. An agent of the version
    before keeps heartbeating beside its polls, and that still counts."""
    poller, old = await env.register("m1"), await env.register("m2")
    for _ in range(4):  # two heartbeat timeouts (30 s): m1 only polls, m2 only heartbeats
        env.clock.now += 15
        await env.assignment(poller)
        await env.heartbeat(old)
        await env.coordinator.heartbeats.flush()  # as the writer does every second
        await env.coordinator.reconciler.reconcile_once()
    assert {m["hostname"]: m["responding"] for m in await env.machines()} == {
        "m1": True, "m2": True}
    env.clock.now += 31  # then neither: both silent
    await env.coordinator.reconciler.reconcile_once()
    assert {m["hostname"]: m["responding"] for m in await env.machines()} == {
        "m1": False, "m2": False}
    await env.assignment(poller)  # a poll brings it back, as a heartbeat would
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("m1"))["responding"] is True


async def test_the_agents_client_heartbeats_only_where_polls_do_not_count(
        env: InProcessCoordinator) -> None:
    """The coordinator says on every poll's answer that it counted it; the agent's client
    then counts a poll under way as its heartbeat, and forgets that for another coordinator,
    whose answer has to say it again."""
    agent = await env.register("m1")
    url = str(env.client.make_url(""))
    client = CoordinatorClient([Endpoint(url)])
    assert not client.polls_beat and not client.beat_within(60)
    held = (await client.assignment(agent["machine_id"], agent["credential"], Held(), 0))[1]
    assert client.polls_beat and client.beat_within(1)
    parked = asyncio.create_task(client.assignment(agent["machine_id"], agent["credential"],
                                                   held, 20))
    await env.parked(agent)
    assert client.beat_within(1)  # the parked poll counts from when it went out
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked
    client.move_to([Endpoint(url)], None)  # another coordinator (a pivot): it says so anew
    assert not client.polls_beat and not client.beat_within(60)
    await client.assignment(agent["machine_id"], agent["credential"], Held(), 0)
    assert client.polls_beat


async def test_a_long_poll_woken_by_a_pass_gets_what_a_fresh_read_gets(env: InProcessCoordinator) -> None:
    """The pass hands the woken long-polls what it wrote (the machine, the cluster and its
    managers, read once for all): the answer must be the one a read afterwards gives."""
    manager, worker = await env.register("m1"), await env.register("w1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    for _ in ("prepare", "deploy"):
        await env.coordinator.reconciler.reconcile_once()
        await env.report_all(manager)
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    before = {a["machine_id"]: await env.assignment(a) for a in (manager, worker)}
    polls = [asyncio.create_task(env.assignment(a, after=before[a["machine_id"]]["generation"],
                                                wait=10)) for a in (manager, worker)]
    await env.parked(manager, worker)
    await env.coordinator.reconciler.reconcile_once()
    woken = await asyncio.gather(*polls)
    assert [a["state"] for a in woken] == ["Ready", "Prepare"]
    assert woken == [await env.assignment(a) for a in (manager, worker)]
    assert woken[1]["values"]["managers.hostnames"] == "m1"


async def test_heartbeats_are_written_in_batches_and_a_shutdown_writes_the_rest(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    agent = await env.register("m1")
    registered = env.clock.now
    env.clock.now += 5
    await env.heartbeat(agent)
    unwritten = await env.store.get_machine(agent["machine_id"])
    assert unwritten is not None and unwritten.last_seen == registered  # not one write each
    flusher = asyncio.create_task(env.coordinator.write_heartbeats(interval=0.01))

    async def written() -> bool:
        machine = await env.store.get_machine(agent["machine_id"])
        return machine is not None and machine.last_seen == env.clock.now

    try:
        await wait_until_async(written, 2, "the heartbeat written")
    finally:
        flusher.cancel()
    env.clock.now += 5
    await env.heartbeat(agent)
    await env.coordinator.close()  # as `coordinator serve` does when stopped
    restarted = SQLiteStore(tmp_path / "coordinator.db")
    await restarted.open()
    try:
        machine = await restarted.get_machine(agent["machine_id"])
        assert machine is not None and machine.last_seen == env.clock.now
    finally:
        await restarted.close()


async def test_deleting_a_deployed_machine_runs_its_reset_items_then_removes_it(
        env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    answer = await env.call("DELETE", "/v1/machines/m1", 202)
    assert answer["status"] == "resetting"
    assignment = await env.assignment(agent)
    assert assignment["phase"] == "reset" and [i["name"] for i in assignment["items"]] == ["wipe"]
    await env.report_all(agent)
    await env.coordinator.reconciler.reconcile_once()
    await env.call("GET", "/v1/machines/m1", 404)
    await env.call("GET", f"/v1/agent/machines/{agent['machine_id']}/assignment", 410,
                   headers={"Authorization": f"Bearer {agent['credential']}"})


async def test_a_pending_machine_is_removed_at_once(env: InProcessCoordinator) -> None:
    await env.register("p1")
    assert (await env.call("DELETE", "/v1/machines/p1", 200))["status"] == "removed"
    assert await env.machines() == []


async def test_artifacts_are_served_to_machines_only_and_never_outside_the_store(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    (tmp_path / "bundle.tar").write_bytes(b"payload")
    (tmp_path.parent / "secret").write_text("no")
    agent = await env.register("m1")
    headers = {"Authorization": f"Bearer {agent['credential']}"}
    response = await env.client.get("/v1/artifacts/bundle.tar", headers=headers)
    assert response.status == 200 and await response.read() == b"payload"
    assert (await env.client.get("/v1/artifacts/bundle.tar")).status == 401
    escaped = await env.client.get("/v1/artifacts/..%2Fsecret", headers=headers)
    assert escaped.status == 404


@pytest.fixture
async def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
               ) -> AsyncIterator[tuple[InProcessCoordinator, asyncio.Lock]]:
    """The coordinator, and its lock (its store's mutex, which every machine write and every
    reconcile pass take) for the test to hold."""
    lock = asyncio.Lock()
    store = SQLiteStore(tmp_path / "coordinator.db")
    monkeypatch.setattr(store, "mutex", lambda: lock)
    async with in_process_coordinator(tmp_path, store=store) as env:
        yield env, lock


async def test_reports_sent_together_are_committed_together_and_each_answered_on_its_own(
        held: tuple[InProcessCoordinator, asyncio.Lock], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    env, lock = held
    agents, setup = await approved_workers(env, 24)
    ghost = {**setup, "name": "ghost"}
    store = env.store
    commits: list[int] = []
    apply = store.apply  # every transaction of the store's

    async def counted(*args: Any, **kwargs: Any) -> Any:
        commits.append(1)
        return await apply(*args, **kwargs)

    monkeypatch.setattr(store, "apply", counted)
    queued: list[object] = []
    submit = GroupCommit.submit

    async def queue(self: GroupCommit[Any], request: Any) -> None:
        queued.append(request)
        await submit(self, request)

    monkeypatch.setattr(GroupCommit, "submit", queue)
    async with lock:  # as a reconcile pass would: the reports queue behind it
        sends = [asyncio.create_task(env.report(agents[0], setup, "prepare", "running"))]
        await wait_until_async(lambda: len(queued) == 1, 5, "the first report queued")
        sends += [asyncio.create_task(env.report(agent, setup, "prepare")) for agent in agents]
        sends.append(asyncio.create_task(env.report(agents[1], ghost, "prepare", expect=409)))
        await wait_until_async(lambda: len(queued) == len(sends), 5, "every report queued")
    answers = await asyncio.gather(*sends)

    assert answers[:-1] == [{"status": "recorded"}] * 25
    assert "ghost" in answers[-1]["error"]  # refused alone: its machine's other report counts
    assert len(commits) == 1
    fingerprint = StateItem.model_validate(setup).fingerprint()
    reopened = SQLiteStore(tmp_path / "coordinator.db")  # answered, so on disk
    await reopened.open()
    try:
        for agent in agents:
            machine = await reopened.get_machine(agent["machine_id"])
            assert machine is not None and fingerprint in machine.applied
            assert machine.progress is not None and machine.progress.status == "succeeded"
        items = [[e.data["status"] for e in await reopened.list_events(
            machine=agent["machine_id"], kinds=["item"])] for agent in agents]
    finally:
        await reopened.close()
    assert items[0] == ["running", "succeeded"]  # one machine's reports in the order sent
    assert items[1:] == [["succeeded"]] * 23


async def test_the_post_deploy_step_waits_for_its_manager_and_wakes_it_when_it_answers_again(
        env: InProcessCoordinator) -> None:
    """The step stays with the first manager while it does not answer (another would start it
    while it may still run it), and the pass that finds it answering again gives it a new
    generation: its agent, polling with the one it held, fetches the step at once."""
    await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER.replace("  worker:\n", (
        '    - {name: helm-controller, phase: postdeploy, action: {type: exec, argv: ["true"]}}\n'
        "  worker:\n")))
    agents = {}
    for hostname, role in (("m1", "manager"), ("m2", "manager"), ("w1", "worker")):
        agents[hostname] = await env.register(hostname)
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
    for _ in range(6):  # m1 prepares and deploys first, then m2 and w1
        await env.coordinator.reconciler.reconcile_once()
        for agent in agents.values():
            if (await env.assignment(agent))["phase"] != "postdeploy":
                await env.report_all(agent)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.call("GET", "/v1/clusters/lab/status", 200))["counts"] == {"Ready": 3}
    held = await env.assignment(agents["m1"])
    assert held["phase"] == "postdeploy"

    env.clock.now += 31  # m1 stops answering; the others go on
    for hostname in ("m2", "w1"):
        await env.heartbeat(agents[hostname])
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.assignment(agents["m2"]))["phase"] is None, "the step moved off m1"
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert status["post_deploy"]["running_on"] is None
    quiet = await env.assignment(agents["m1"])  # what m1's agent fetches meanwhile
    assert quiet["phase"] is None and quiet["generation"] > held["generation"]

    await env.heartbeat(agents["m1"])
    await env.coordinator.reconciler.reconcile_once()
    woken = await env.assignment(agents["m1"], after=quiet["generation"], wait=5)
    assert woken["phase"] == "postdeploy"
    assert (await env.call("GET", "/v1/clusters/lab/status", 200))["post_deploy"]["running_on"] == "m1"
