"""Input from hostile clients and nodes: every bad value is a 4xx naming what is wrong, never a
5xx, and never stored (issue 20, identity and "no 5xx from input")."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from tests.support.builders import API_CLUSTER, registration
from tests.support.harness import InProcessCoordinator


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def register(env: InProcessCoordinator, status: int, hostname: str = "node-a",
                   **fields: Any) -> dict[str, Any]:
    token = await env.join_token()
    body = {**registration("node-a", token), "hostname": hostname, **fields}
    return await env.call("POST", "/v1/agent/register", status, json=body, headers=bearer(token))


@pytest.mark.parametrize("hostname", [
    "node\nw9  Ready", "node\x1b[2J", "node-${cluster.name}", "n" * 10_000, "a" * 64 + ".lab",
    "-node", "node_a", ""])
async def test_a_hostname_that_is_not_a_host_name_is_refused(
        env: InProcessCoordinator, hostname: str) -> None:
    """The answer quotes the name refused (escaped, cut when long): the operator reading
    the agent's log learns which name to change, and how."""
    answer = await register(env, 422, hostname)
    assert [p["path"] for p in answer["problems"]] == ["hostname"]
    said = answer["problems"][0]["message"]
    assert said.startswith(f"{hostname[:64]!r}") and "hostnamectl set-hostname" in said, said
    assert ("... (10000 characters)" in said) == (len(hostname) == 10_000), said
    assert await env.machines() == []


@pytest.mark.parametrize("ip", ["10.0.0.1\nevil", "10.0.0.300", "${managers}", "x" * 100])
async def test_an_address_that_is_not_an_ip_address_is_refused(
        env: InProcessCoordinator, ip: str) -> None:
    answer = await register(env, 422, ip=ip)
    assert [p["path"] for p in answer["problems"]] == ["ip"]
    said = answer["problems"][0]["message"]
    assert said.startswith(f"{ip[:64]!r}") and said.endswith(" is not an IP address"), said


async def test_a_host_name_and_an_ipv6_address_are_accepted(env: InProcessCoordinator) -> None:
    await register(env, 201, "node-1.rack-2.example", ip="fd00::1")


async def test_facts_are_bounded(env: InProcessCoordinator) -> None:
    answer = await register(env, 422, facts={"blob": "x" * 100_000})
    assert "facts: more than 65536 bytes as JSON" in answer["error"]


async def test_a_pending_machine_is_not_displaced_by_another_agent(
        env: InProcessCoordinator) -> None:
    """Another join with the same hostname would replace the address and facts of the Pending
    machine, and the admin approving `node-a` would approve the newcomer."""
    first = await register(env, 201, ip="10.0.0.1")
    answer = await register(env, 409, ip="10.6.6.6")
    assert "node-a is already registered in lab by another agent" in answer["error"]
    machine = await env.call("GET", "/v1/machines/node-a", 200)
    assert (machine["id"], machine["ip"]) == (first["machine_id"], "10.0.0.1")


async def test_deeply_nested_json_is_refused_before_authentication(
        env: InProcessCoordinator) -> None:
    for depth in (100, 30_000):  # a registration without its token in a header: 64 KiB at most
        response = await env.client.post("/v1/agent/register", data="[" * depth + "]" * depth,
                                         headers={"Content-Type": "application/json"})
        assert response.status == 422, await response.text()
        assert "nested deeper than 64 levels" in (await response.json())["error"]


async def test_deeply_nested_yaml_is_refused(env: InProcessCoordinator) -> None:
    for depth in (100, 100_000):
        answer = await env.call("PUT", "/v1/clusters", 422, data="a: " + "[" * depth + "]" * depth)
        assert "nested deeper than 64 levels" in answer["error"]


async def test_a_wait_that_is_not_a_number_of_seconds_is_refused(
        env: InProcessCoordinator) -> None:
    agent = await register(env, 201)
    path = f"/v1/agent/machines/{agent['machine_id']}/assignment"
    for wait in ("nan", "-1"):
        answer = await env.call("GET", f"{path}?wait={wait}", 422,
                                headers=bearer(agent["credential"]))
        assert "wait: must be from 0 to 60 seconds" in answer["error"]


async def test_a_nul_in_an_artifact_name_is_refused(env: InProcessCoordinator) -> None:
    agent = await register(env, 201)
    answer = await env.call("GET", "/v1/artifacts/a%00b", 422,
                            headers=bearer(agent["credential"]))
    assert "control characters" in answer["error"]


async def test_an_artifact_name_too_long_for_a_file_is_refused(env: InProcessCoordinator) -> None:
    """The fuzzer's find: a name no file system takes (a part over 255 bytes) answered 500."""
    agent = await register(env, 201)
    for name in ("\u0337" * 200, "a" * 300):
        answer = await env.call("GET", f"/v1/artifacts/{urllib.parse.quote(name)}", 422,
                                headers=bearer(agent["credential"]))
        assert "name: too long for a file name" in answer["error"]


async def test_a_join_token_lifetime_is_bounded(env: InProcessCoordinator) -> None:
    answer = await env.call("POST", "/v1/clusters/lab/join-tokens", 422,
                            json={"ttl": "9" * 400})
    assert "ttl" in answer["error"] and "longer than 36500d" in answer["error"]


async def test_a_guessable_credential_is_refused(env: InProcessCoordinator) -> None:
    agent = await register(env, 201)
    path = f"/v1/agent/machines/{agent['machine_id']}/credential"
    answer = await env.call("POST", path, 422, json={"credential": "a" * 32},
                            headers=bearer(agent["credential"]))
    assert "credential: too guessable" in answer["error"]
    answer = await register(env, 422, "node-b", credential="ab" * 20)
    assert "credential: too guessable" in answer["error"]


async def test_two_machines_cannot_rotate_to_one_credential(env: InProcessCoordinator) -> None:
    a = await register(env, 201, "node-a")
    b = await register(env, 201, "node-b")
    shared = "machine_0123456789abcdefghijklmnopqrstuvwxyzABCD"
    await env.call("POST", f"/v1/agent/machines/{a['machine_id']}/credential", 200,
                   json={"credential": shared}, headers=bearer(a["credential"]))
    answer = await env.call("POST", f"/v1/agent/machines/{b['machine_id']}/credential", 409,
                            json={"credential": shared}, headers=bearer(b["credential"]))
    assert "another machine holds this credential" in answer["error"]
    for machine, secret in ((a, shared), (b, b["credential"])):  # neither is locked out
        await env.call("POST", f"/v1/agent/machines/{machine['machine_id']}/heartbeat", 200,
                       headers=bearer(secret))


async def test_a_hostname_in_two_clusters_is_named_with_its_cluster(
        env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=API_CLUSTER.replace("name: lab", "name: edge"))
    await env.register("node-a")
    edge = await env.register("node-a", cluster="edge")
    answer = await env.call("GET", "/v1/machines/node-a", 409)
    assert "hostname node-a exists in clusters edge, lab: name one (--cluster" in answer["error"]
    found = await env.call("GET", "/v1/machines/node-a?cluster=edge", 200)
    assert found["id"] == edge["machine_id"]
    await env.call("GET", "/v1/machines/node-b?cluster=edge", 404)
    await env.cli("approve", "node-a", "--cluster", "edge", "--role", "worker")
    await env.cli("machines", "label", "node-a", "--cluster", "edge", "zone=b")
    shown = await env.cli("machines", "get", "node-a", "--cluster", "edge", "-o", "json")
    assert '"cluster": "edge"' in shown and '"zone": "b"' in shown
    refused = await env.cli("machines", "get", "node-a", exit_code=1)
    assert "exists in clusters edge, lab" in refused
    assert not (await env.call("GET", "/v1/machines/node-a?cluster=lab", 200))["approved"]
