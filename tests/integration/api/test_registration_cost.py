"""What a registration costs a stranger: the join token (in the Authorization header) is checked
before the body is read, a registration without it is read only up to a small size, and the
registrations whose body is read are held to a budget for all addresses together."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from coordinator.api.context import MAX_BODY_BYTES
from nodeagent.identity import new_credential
from tests.support.builders import registration
from tests.support.harness import InProcessCoordinator, in_process_coordinator

REGISTER = "/v1/agent/register"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def large(token: str, size: int) -> bytes:
    """A registration that parses and validates (its facts padded to about size bytes)."""
    body = registration("big", token, facts={"padding": "x" * size})
    return json.dumps(body).encode()


async def test_an_unknown_join_token_is_refused_before_the_body_is_read(
        env: InProcessCoordinator) -> None:
    # Not even JSON: parsing it would answer 422; a token checked first answers 401.
    garbage = b"{" + b" " * (MAX_BODY_BYTES - 16)
    response = await env.client.post(REGISTER, data=garbage, headers=bearer("join-forged"))
    assert response.status == 401
    assert (await response.json())["error"] == "unknown join token"
    assert await env.machines() == []


async def test_the_header_token_is_the_one_used(env: InProcessCoordinator) -> None:
    """A known header token cannot smuggle in a body whose own token differs."""
    token = await env.join_token()
    other = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={})
    await env.call("DELETE", f"/v1/join-tokens/{other['id']}", 200)
    body = registration("node-a", token)
    refused = await env.call("POST", REGISTER, 401, json=body, headers=bearer(other["token"]))
    assert "revoked" in refused["error"]


async def test_a_retry_gets_its_machine_after_the_token_ran_out(env: InProcessCoordinator) -> None:
    once = (await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={"maxUses": 1}))
    body = {**registration("node-a", once["token"]), "credential": new_credential()}
    first = await env.call("POST", REGISTER, 201, json=body, headers=bearer(once["token"]))
    again = await env.call("POST", REGISTER, 201, json=body, headers=bearer(once["token"]))
    assert again["machine_id"] == first["machine_id"]


async def test_an_old_agent_registers_but_only_with_a_small_body(env: InProcessCoordinator) -> None:
    """Agents from before the header send the token in the body alone: still welcome, but a
    stranger cannot make the coordinator parse megabytes that way."""
    token = await env.join_token()
    await env.call("POST", REGISTER, 201, json=registration("old-agent", token), headers={})
    refused = await env.client.post(REGISTER, data=large(token, 256 * 1024))
    assert refused.status == 413
    assert "Authorization header" in (await refused.json())["error"]
    assert [m["hostname"] for m in await env.machines()] == ["old-agent"]


async def test_the_registration_budget_holds_against_many_addresses(tmp_path: Path) -> None:
    """30 addresses, 2 registrations each: well within each address's limit, but only the
    budget of all of them together is registered; the rest are told to retry."""
    async with in_process_coordinator(tmp_path, register_total_burst=20,
                                      register_total_rate=0.01) as env:
        token = await env.join_token()
        url = env.client.make_url(REGISTER)

        async def from_address(index: int) -> list[int]:
            connector = aiohttp.TCPConnector(local_addr=(f"127.0.1.{index}", 0))
            async with aiohttp.ClientSession(connector=connector) as session:
                statuses = []
                for attempt in range(2):
                    body = registration(f"n{index}-{attempt}", token)
                    async with session.post(url, json=body, headers=bearer(token)) as answer:
                        statuses.append(answer.status)
                        if answer.status == 429:
                            assert "at once" in (await answer.json())["error"]
                return statuses

        statuses = [s for per in await asyncio.gather(*map(from_address, range(1, 31)))
                    for s in per]
        assert statuses.count(201) == 20 and statuses.count(429) == 40


async def test_a_registration_refused_for_its_hostname_uses_no_join_token(
        env: InProcessCoordinator) -> None:
    """A second node of a taken hostname is refused (409), and the token's use is still
    there for the node it was meant for: `join-token list` shows it unused and active."""
    await env.register("node-a")
    once = await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json={"maxUses": 1})
    refused = await env.call("POST", REGISTER, 409, json=registration("node-a", once["token"]),
                             headers=bearer(once["token"]))
    assert "node-a is already" in refused["error"]
    listed = await env.cli("join-token", "list", "lab")
    assert "0/1" in next(line for line in listed.splitlines() if line.startswith(once["id"]))
    await env.call("POST", REGISTER, 201, json=registration("node-b", once["token"]),
                   headers=bearer(once["token"]))
