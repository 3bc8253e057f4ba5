"""DELETE /v1/clusters/{name} through the API on a real store: the cluster is marked deleting
and every machine leaves in the same change (one never deployed removed at once, one that
ran items into Deleting for its reset items), recorded in the history, its agent's parked
long-poll answered at once."""

from __future__ import annotations

import asyncio

from tests.support.builders import API_CLUSTER
from tests.support.harness import InProcessCoordinator


async def test_a_cluster_deleted_marks_itself_and_all_its_machines_at_once(
        env: InProcessCoordinator) -> None:
    await env.register("w1")  # left Pending
    w2 = await env.register("w2")
    await env.call("POST", "/v1/machines/w2/approve", 200, json={"role": "worker"})
    await env.until("w2 in Prepare", lambda: _state_is(env, "w2", "Prepare"))
    held = await env.assignment(w2)
    parked = asyncio.ensure_future(env.assignment(w2, held["generation"], 20))
    await asyncio.sleep(0.2)

    await env.call("DELETE", "/v1/clusters/lab", 202)

    woken = await asyncio.wait_for(parked, 5)  # not at the end of its 20 s
    assert woken["generation"] > held["generation"] and woken["phase"] == "reset"
    assert (await env.call("GET", "/v1/clusters/lab", 200))["deleting"]
    assert [(m["hostname"], m["state"]) for m in await env.machines()] == [("w2", "Deleting")]
    said = [(e["hostname"], e["message"]) for e in await env.call("GET", "/v1/events", 200)
            if e["kind"] in ("removed", "state") and e["hostname"] in ("w1", "w2")]
    assert said[-2:] == [("w1", "w1 removed"),
                         ("w2", "w2 Prepare -> Deleting: running reset items")]
    # Applying to a cluster being deleted is refused, and changes nothing.
    refused = await env.call("PUT", "/v1/clusters", 409,
                             data=API_CLUSTER.replace('release: "1.0"', 'release: "2.0"'))
    assert refused["error"] == "cluster lab is being deleted"
    assert (await env.call("GET", "/v1/clusters/lab", 200))["release"] == "1.0"


async def _state_is(env: InProcessCoordinator, hostname: str, state: str) -> bool:
    return bool((await env.machine(hostname))["state"] == state)
