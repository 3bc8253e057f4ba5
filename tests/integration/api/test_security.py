"""Who may do what: every endpoint against missing, wrong, read-only, revoked and expired
credentials; join token limits; audit; rate limits and body limits."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from coordinator.api.context import MAX_BODY_BYTES
from coordinator.api.routes import ROUTES
from coordinator.service.credentials import CREDENTIAL_CACHE_SECONDS
from tests.support.builders import API_CLUSTER, credential, registration
from tests.support.harness import InProcessCoordinator


def concrete(path: str, machine_id: str) -> str:
    """A route's path with its parameters filled in (for a machine: the given one)."""
    path = path.replace("{machine_id}", machine_id)
    return re.sub(r"\{[a-z_]+\}", "x", path)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def status_of(env: InProcessCoordinator, method: str, path: str, headers: dict[str, str]) -> int:
    response = await env.client.request(method, path, headers=headers, json={})
    return response.status


async def test_no_endpoint_but_the_open_ones_answers_without_a_credential(env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    for route in ROUTES:
        method, path = route.method, route.path
        status = await status_of(env, method, concrete(path, agent["machine_id"]), {})
        if route.auth == "open":
            assert status != 401, (method, path)
        else:
            assert status == 401, (method, path, status)


async def test_a_machine_credential_opens_only_its_own_agent_endpoints(env: InProcessCoordinator) -> None:
    a = await env.register("node-a")
    b = await env.register("node-b")
    for route in ROUTES:
        method, path = route.method, route.path
        if route.auth == "open":
            continue
        status = await status_of(env, method, concrete(path, b["machine_id"]),
                                 bearer(a["credential"]))
        # B's endpoints and every admin endpoint refuse A's credential; artifacts are for any
        # registered machine (404 here: there is no artifact x).
        if path.startswith("/v1/artifacts/"):
            assert status == 404, (method, path, status)
        else:
            assert status == 401, (method, path, status)


async def test_a_read_only_token_reads_everything_and_changes_nothing(env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/admin-tokens", 201,
                             json={"name": "dashboard", "role": "read-only"})
    reader = bearer(created["token"])
    before = len(await env.call("GET", "/v1/events", 200))
    for route in ROUTES:
        method, path = route.method, route.path
        if route.auth != "admin":
            continue
        status = await status_of(env, method, concrete(path, "m"), reader)
        if method == "GET" or route.dry_run:
            assert status not in (401, 403), (method, path, status)
        else:
            assert status == 403, (method, path, status)
    assert len(await env.call("GET", "/v1/events", 200)) == before  # nothing changed


async def test_a_read_only_token_dry_runs_an_upgrade_unaudited(env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/admin-tokens", 201,
                             json={"name": "dashboard", "role": "read-only"})
    reader = bearer(created["token"])
    before = await env.call("GET", "/v1/events", 200)
    stored = await env.call("GET", "/v1/clusters/lab/upgrade-plan", 200, headers=reader)
    assert (stored["release"], stored["steps"]) == ("1.0", [])
    what_if = API_CLUSTER.replace('release: "1.0"', 'release: "2.0"')
    planned = await env.call("POST", "/v1/clusters/lab/upgrade-plan", 200, headers=reader,
                             data=what_if)
    assert planned["release"] == "2.0"
    assert (await env.call("GET", "/v1/clusters/lab", 200))["release"] == "1.0"
    assert await env.call("GET", "/v1/events", 200) == before, "a dry run was audited"


async def test_every_admin_change_is_audited_with_who_did_it(env: InProcessCoordinator) -> None:
    await env.register("node-a")
    await env.call("POST", "/v1/machines/node-a/approve", 200, json={"role": "worker"})
    audit = [e for e in await env.call("GET", "/v1/events", 200) if e["kind"] == "audit"]
    changes = [(e["data"]["method"], e["data"]["path"]) for e in audit]
    assert ("POST", "/v1/machines/node-a/approve") in changes
    assert ("POST", "/v1/clusters/lab/join-tokens") in changes
    assert all(e["data"]["actor"].startswith("tests (") for e in audit)
    assert all(e["time"] == env.clock.now for e in audit)


async def test_a_revoked_admin_token_is_refused(env: InProcessCoordinator) -> None:
    created = await env.call("POST", "/v1/admin-tokens", 201, json={"name": "ci", "role": "admin"})
    await env.call("GET", "/v1/machines", 200, headers=bearer(created["token"]))
    await env.call("DELETE", f"/v1/admin-tokens/{created['id']}", 200)
    await env.call("GET", "/v1/machines", 401, headers=bearer(created["token"]))


async def test_an_unapproved_machine_receives_no_items(env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    await env.coordinator.reconciler.reconcile_once()
    assignment = await env.assignment(agent)
    assert assignment["state"] == "Pending" and assignment["items"] == []


async def test_a_revoked_or_deleted_machine_is_refused(env: InProcessCoordinator) -> None:
    a = await env.register("node-a")
    b = await env.register("node-b")
    for agent in (a, b):  # authenticated once: the coordinator keeps what it read (issue 8)
        await env.call("POST", f"/v1/agent/machines/{agent['machine_id']}/heartbeat", 200,
                       headers=bearer(agent["credential"]))
    await env.call("POST", "/v1/machines/node-a/revoke", 200)
    await env.call("GET", f"/v1/agent/machines/{a['machine_id']}/assignment", 401,
                   headers=bearer(a["credential"]))
    assert (await env.call("GET", "/v1/machines/node-a", 200))["credential"]["revoked"]
    await env.call("DELETE", "/v1/machines/node-b", 200)
    gone = await env.call("POST", f"/v1/agent/machines/{b['machine_id']}/heartbeat", 410,
                          headers=bearer(b["credential"]))
    assert gone["error"].startswith(f"machine node-b ({b['machine_id']}) was deleted from "
                                    "cluster lab at ")
    # A revoked credential proves nothing: deleted, its machine is still a stranger's.
    await env.call("DELETE", "/v1/machines/node-a", 200)
    await env.call("POST", f"/v1/agent/machines/{a['machine_id']}/heartbeat", 401,
                   headers=bearer(a["credential"]))


async def test_heartbeats_reuse_what_was_read_of_a_credential_for_a_minute(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    """A heartbeat every 10 s (the agent's default) costs no read of the store; a change no
    coordinator made (another process on the database file) counts within a minute."""
    agent = await env.register("node-a")
    heartbeat = f"/v1/agent/machines/{agent['machine_id']}/heartbeat"
    await env.call("POST", heartbeat, 200, headers=bearer(agent["credential"]))
    with sqlite3.connect(tmp_path / "coordinator.db") as db:
        db.execute("UPDATE machines SET credential_hash = '' WHERE id = ?", (agent["machine_id"],))
    for _ in range(int(CREDENTIAL_CACHE_SECONDS // 10)):
        env.clock.now += 10
        await env.call("POST", heartbeat, 200, headers=bearer(agent["credential"]))
    env.clock.now += 10
    await env.call("POST", heartbeat, 401, headers=bearer(agent["credential"]))


async def test_an_expired_machine_credential_is_refused(env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    expires = (await env.call("GET", "/v1/machines/node-a", 200))["credential"]["expires_at"]
    assert expires == pytest.approx(env.clock.now + 365 * 86400)
    env.clock.now = expires
    answer = await env.call("POST", f"/v1/agent/machines/{agent['machine_id']}/heartbeat", 401,
                            headers=bearer(agent["credential"]))
    assert "expired" in answer["error"]


async def test_a_rotated_credential_replaces_the_old_one(env: InProcessCoordinator) -> None:
    agent = await env.register("node-a")
    new = credential("new")
    env.clock.now += 100
    rotated = await env.call("POST", f"/v1/agent/machines/{agent['machine_id']}/credential", 200,
                             headers=bearer(agent["credential"]), json={"credential": new})
    assert rotated["credential_expires_at"] == pytest.approx(env.clock.now + 365 * 86400)
    heartbeat = f"/v1/agent/machines/{agent['machine_id']}/heartbeat"
    await env.call("POST", heartbeat, 200, headers=bearer(new))
    await env.call("POST", heartbeat, 401, headers=bearer(agent["credential"]))


async def join_with(env: InProcessCoordinator, token: str, hostname: str, status: int) -> dict[str, Any]:
    body = registration(hostname, token)
    return await env.call("POST", "/v1/agent/register", status, json=body, headers={})


async def test_join_tokens_expire_run_out_and_can_be_revoked(env: InProcessCoordinator) -> None:
    expiring = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={"ttl": "1h"})
    once = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={"maxUses": 1})
    revoked = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={})
    await env.call("DELETE", f"/v1/join-tokens/{revoked['id']}", 200)

    await join_with(env, once["token"], "a", 201)
    refused = await join_with(env, once["token"], "b", 401)
    assert "used 1 times" in refused["error"]
    assert "revoked" in (await join_with(env, revoked["token"], "c", 401))["error"]
    env.clock.now += 3600
    assert "expired" in (await join_with(env, expiring["token"], "d", 401))["error"]
    listed = {t["id"]: t for t in await env.call("GET", "/v1/clusters/lab/join-tokens", 200)}
    assert listed[once["id"]]["uses"] == 1 and listed[revoked["id"]]["revoked"]
    assert "token" not in listed[once["id"]]  # the secret is never shown again
    assert [m["hostname"] for m in await env.machines()] == ["a"]


async def test_a_join_token_cannot_take_over_an_approved_machine(env: InProcessCoordinator) -> None:
    await env.register("node-a")
    await env.call("POST", "/v1/machines/node-a/approve", 200, json={"role": "worker"})
    token = await env.join_token()
    answer = await join_with(env, token, "node-a", 409)
    assert "already a member" in answer["error"]


async def test_a_registration_flood_is_slowed_down(env: InProcessCoordinator) -> None:
    token = await env.join_token()
    statuses = [(await env.client.post("/v1/agent/register", json=registration(f"n{i}", token)))
                for i in range(60)]
    limited = [r for r in statuses if r.status == 429]
    assert limited, "60 registrations at once were all accepted"
    assert int(limited[0].headers["Retry-After"]) >= 1


async def test_an_oversized_body_is_refused_before_it_is_read(env: InProcessCoordinator) -> None:
    response = await env.client.put("/v1/clusters", headers=env.admin,
                                    data=b"x" * (MAX_BODY_BYTES + 1))
    assert response.status == 413
    assert "larger than" in (await response.json())["error"]


@pytest.mark.parametrize(("method", "path"), [("PUT", "/v1/clusters"),
                                              ("POST", "/v1/admin-tokens"),
                                              ("POST", "/v1/agent/register")])
async def test_a_body_that_is_not_utf8_is_a_4xx_not_a_crash(env: InProcessCoordinator, method: str,
                                                             path: str) -> None:
    """Found by the schemathesis run (test_fuzz.py): such bodies used to answer 500."""
    headers = {} if path == "/v1/agent/register" else env.admin  # an old agent's: no header
    response = await env.client.request(method, path, headers=headers, data=b"\xff\x1e\x8f")
    assert response.status == 422
    assert "not UTF-8" in (await response.json())["error"]
