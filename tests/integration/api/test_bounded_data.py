"""What a node or a client can make the coordinator keep and answer is bounded: reports only
of the machine's current assignment, bounded texts, an event history with a retention, and
pages of it with a maximum (issue 20, bounded data)."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.model import MachineState
from coordinator.domain.records import Event
from tests.support.builders import API_CLUSTER, item_report
from tests.support.harness import InProcessCoordinator

SETUP = {"name": "setup", "phase": "prepare", "action": {"type": "exec", "argv": ["true"]}}
JOIN = {"name": "join", "phase": "deploy", "action": {"type": "exec", "argv": ["true"]}}


async def send(env: InProcessCoordinator, agent: dict[str, str], status: int,
               report: dict[str, object]) -> dict[str, object]:
    return await env.call("POST", f"/v1/agent/machines/{agent['machine_id']}/reports", status,
                          json=report, headers={"Authorization": f"Bearer {agent['credential']}"})


async def test_an_unapproved_machine_cannot_report_and_stores_nothing(
        env: InProcessCoordinator) -> None:
    """A Pending machine reporting the spec's own items: refused, no event written."""
    agent = await env.register("node-a")
    before = await env.call("GET", "/v1/events", 200)
    answer = await send(env, agent, 409, item_report(SETUP, "prepare"))
    assert "not an item of the current assignment of node-a (Pending, not approved)" \
        in str(answer["error"])
    assert await env.call("GET", "/v1/events", 200) == before


async def test_only_the_items_of_the_current_assignment_are_accepted(
        env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    await env.call("POST", "/v1/machines/node-a/approve", 200, json={"role": "worker"})
    await env.until("node-a in Prepare", lambda: machine_in(env, "Prepare"))
    await send(env, agent, 409, item_report(JOIN, "deploy"))  # a later phase's item
    await send(env, agent, 409, {**item_report(SETUP, "prepare"), "item": "not-setup"})
    await send(env, agent, 200, item_report(SETUP, "prepare"))


async def machine_in(env: InProcessCoordinator, state: str) -> bool:
    return bool((await env.call("GET", "/v1/machines/node-a", 200))["state"] == state)


async def test_item_names_are_bounded_on_the_wire(env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    answer = await send(env, agent, 422, {**item_report(SETUP, "prepare"),
                                          "item": "x" * 1_000_000})
    assert [p["path"] for p in answer["problems"]] == ["item"]  # type: ignore[union-attr]


async def test_events_are_read_in_pages_of_at_most_a_thousand(env: InProcessCoordinator) -> None:
    for name in ("a", "b", "c"):
        await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER.replace("name: lab",
                                                                             f"name: {name}"))
    everything = await env.call("GET", "/v1/events?limit=1000", 200)
    assert len(everything) >= 4
    for limit in ("0", "-1", "1001"):
        answer = await env.call("GET", f"/v1/events?limit={limit}", 422)
        assert "limit: must be from 1 to 1000" in answer["error"]
    for after_id in ("-1", "9" * 30):  # beyond a database integer: was a 500
        answer = await env.call("GET", f"/v1/events?after_id={after_id}", 422)
        assert "after_id: must be an event id" in answer["error"]
    pages, after = [], 0
    while page := await env.call("GET", f"/v1/events?limit=2&after_id={after}", 200):
        pages.append(page)
        after = page[-1]["id"]
    assert [e for p in pages for e in p] == everything and max(map(len, pages)) == 2


async def test_the_event_history_is_kept_for_its_retention(env: InProcessCoordinator) -> None:
    await env.register("node-a")
    old = await env.call("GET", "/v1/events", 200)
    env.clock.now += 31 * 86400
    await env.register("node-b")
    assert await env.coordinator.history.prune() == len(old)
    kept = await env.call("GET", "/v1/events", 200)
    assert {e["id"] for e in kept}.isdisjoint(e["id"] for e in old)
    assert "node-b" in [e["hostname"] for e in kept] and "node-a" not in [e["hostname"] for e in kept]


async def test_a_status_computed_after_a_prune_reads_only_the_history_left(
        env: InProcessCoordinator) -> None:
    """The status keeps the history it read between calls: a prune must drop it, or the
    rollout would go on counting from events the store no longer holds."""
    agent = await env.register("node-a")
    await env.call("POST", f"/v1/machines/{agent['machine_id']}/approve", 200,
                   json={"role": "worker"})
    await env.coordinator.reconciler.reconcile_once()  # to Prepare: a state event now
    prepared_at = env.clock.now
    env.clock.now += 50
    machine = await env.store.get_machine(agent["machine_id"])
    assert machine is not None and machine.state is MachineState.PREPARE
    await env.coordinator.writes.apply(Change(
        machines=[replace(machine, state=MachineState.DEPLOY, state_since=env.clock.now)],
        events=[Event(time=env.clock.now, cluster="lab", kind="state", message="",
                      machine=machine.id, hostname=machine.hostname,
                      data={"from": "Prepare", "to": "Deploy"})]))

    async def rollout_began() -> float:
        status = await env.call("GET", "/v1/clusters/lab/status?machines=false", 200)
        return status["rollout"]["started_at"]

    assert await rollout_began() == prepared_at  # its run began when it entered Prepare
    env.clock.now += 31 * 86400
    assert await env.coordinator.history.prune() > 0
    assert await rollout_began() == prepared_at + 50  # no event left: since it is in Deploy
