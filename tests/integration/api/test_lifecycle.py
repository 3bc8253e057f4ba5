"""A machine's life as its agent sees it over the API: a registration is safe to retry (the
same agent gets the same machine), and once its record is removed, every request of its agent
is told so (410, with when and where) rather than refused as a stranger's."""

from __future__ import annotations

import asyncio
import time

from tests.support.builders import AUTO_APPROVE_CLUSTER, credential, registration
from tests.support.driver import Registered
from tests.support.harness import InProcessCoordinator

CREDENTIAL = credential("w3")  # what an agent chose and saved before registering


def bearer(agent: Registered) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent['credential']}"}


def removal(env: InProcessCoordinator, agent: Registered, hostname: str) -> str:
    """What the coordinator tells the agent of a machine deleted now."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(env.clock.now))
    return (f"machine {hostname} ({agent['machine_id']}) was deleted from cluster lab at {when}: "
            "its credential and its record are gone; register again to rejoin, as a new machine")


async def agent_answers(env: InProcessCoordinator, agent: Registered) -> set[tuple[int, str]]:
    """The status and error of every request its agent makes."""
    base = f"/v1/agent/machines/{agent['machine_id']}"
    requests = [("GET", f"{base}/assignment", None), ("POST", f"{base}/heartbeat", None),
                ("POST", f"{base}/precheck", {}), ("POST", f"{base}/reports", {}),
                ("POST", f"{base}/credential", {"credential": credential("c")}),
                ("GET", "/v1/artifacts/anything", None)]
    answers = set()
    for method, path, body in requests:
        response = await env.client.request(method, path, headers=bearer(agent), json=body)
        answers.add((response.status, (await response.json())["error"]))
    return answers


async def test_the_agent_of_a_machine_deleted_after_its_reset_is_told_so_everywhere(
        env: InProcessCoordinator) -> None:
    agent = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    await env.call("DELETE", "/v1/machines/m1", 202)
    deleting = await env.assignment(agent)
    assert deleting["state"] == "Deleting" and [i["name"] for i in deleting["items"]] == ["wipe"]
    # The agent's long-poll is parked when its last reset item's report removes the machine.
    parked = asyncio.create_task(env.client.get(
        f"/v1/agent/machines/{agent['machine_id']}/assignment"
        f"?after={deleting['generation']}&wait=20", headers=bearer(agent)))
    await env.parked(agent)
    env.clock.now += 60
    await env.report_all(agent)
    await env.coordinator.reconciler.reconcile_once()
    woken = await asyncio.wait_for(parked, 5)
    told = removal(env, agent, "m1")
    assert (woken.status, (await woken.json())["error"]) == (410, told)
    assert await agent_answers(env, agent) == {(410, told)}


async def test_a_pending_machine_deleted_at_once_is_gone_for_its_agent_too(
        env: InProcessCoordinator) -> None:
    agent = await env.register("w1")
    await env.call("POST", f"/v1/agent/machines/{agent['machine_id']}/heartbeat", 200,
                   headers=bearer(agent))  # what authentication read of it is cached
    await env.call("DELETE", "/v1/machines/w1", 200)
    assert await agent_answers(env, agent) == {(410, removal(env, agent, "w1"))}


async def test_a_registration_whose_answer_was_lost_is_retried_to_the_same_machine(
        env: InProcessCoordinator) -> None:
    """The coordinator committed it, then its answer was lost: the agent sends it again, with
    the credential it chose and saved first. A single-use join token is not used twice."""
    await env.call("PUT", "/v1/clusters", 200, data=AUTO_APPROVE_CLUSTER)
    once = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={"maxUses": 1})
    body = {**registration("w3", once["token"]), "credential": CREDENTIAL}
    first = await env.call("POST", "/v1/agent/register", 201, json=body, headers={})
    assert (await env.machine("w3"))["approved"]  # auto-approved: no longer Pending
    again = await env.call("POST", "/v1/agent/register", 201, json=body, headers={})
    assert again == first and first["credential"] == CREDENTIAL
    # Both at once (the first still being written when the retry comes): one machine too.
    both = {**registration("w4", (await env.call("POST", "/v1/clusters/lab/join-tokens", 201,
                                                 json={}))["token"]), "credential": credential("w4")}
    answers = await asyncio.gather(*(env.call("POST", "/v1/agent/register", 201, json=both,
                                              headers={}) for _ in range(2)))
    assert answers[0] == answers[1]
    assert sorted(m["hostname"] for m in await env.machines()) == ["w3", "w4"]
    events = await env.call("GET", "/v1/events?kind=registered", 200)
    assert [e["hostname"] for e in events] == ["w3", "w4"]
    (token,) = [t for t in await env.call("GET", "/v1/clusters/lab/join-tokens", 200)
                if t["id"] == once["id"]]
    assert token["uses"] == 1
    await env.heartbeat(first)


async def test_a_retry_never_lets_another_node_take_a_machine(env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=AUTO_APPROVE_CLUSTER)
    token = await env.join_token()
    await env.call("POST", "/v1/agent/register", 201, headers={},
                   json={**registration("w3", token), "credential": CREDENTIAL})
    other_node = await env.call("POST", "/v1/agent/register", 409, headers={},
                                json={**registration("w3", token), "credential": credential("o")})
    assert "w3 is already a member of lab" in other_node["error"]
    other_name = await env.call("POST", "/v1/agent/register", 409, headers={},
                                json={**registration("w5", token), "credential": CREDENTIAL})
    assert "credential is that of machine w3" in other_name["error"]
    short = await env.call("POST", "/v1/agent/register", 422, headers={},
                           json={**registration("w6", token), "credential": "short"})
    assert [p["path"] for p in short["problems"]] == ["credential"]
