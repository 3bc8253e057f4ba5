"""Machines' secrets (kubeconfig, outputs, join material, mint jobs) never leave the
coordinator through its admin API and are never in the database file in the clear; the key
that seals them is made by `coordinator init` and refused when it cannot be trusted."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from coordinator.api.routes import ROUTES
from coordinator.server.init import initialize
from coordinator.server.secrets_key import FILE_NAME
from coordinator.server.serve import ServeOptions, SetupError, open_coordinator
from tests.support.builders import SECRETS, with_secrets
from tests.support.harness import InProcessCoordinator

STREAM = "/v1/events/stream"


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


async def read_stream(env: InProcessCoordinator, headers: dict[str, str], events: int) -> str:
    """The event stream from the first event on, until it has sent `events` of them."""
    response = await env.client.get(f"{STREAM}?after_id=0", headers=headers)
    text = ""
    async with asyncio.timeout(10):
        while text.count("\nevent: ") < events:
            text += (await response.content.readline()).decode()
    response.close()
    return text


async def every_admin_view(env: InProcessCoordinator, headers: dict[str, str],
                           machine: dict[str, str]) -> dict[str, str]:
    """The text of every GET an admin (or dashboard) can make, by path: routes' parameters
    filled with the cluster lab and the machine, by hostname and by id."""
    paths = set()
    for route in ROUTES:
        if route.method != "GET" or route.auth == "machine" or route.path == STREAM:
            continue
        for ref in (machine["hostname"], machine["id"]):
            path = route.path.replace("{ref}", ref).replace("{name}", "lab")
            paths.add(re.sub(r"\{[a-z_]+\}", "x", path))
    paths |= {"/v1/machines?cluster=lab", f"/v1/events?machine={machine['id']}"}
    views = {}
    for path in sorted(paths):
        response = await env.client.get(path, headers=headers)
        views[path] = await response.text()
    dry_run = await env.client.post("/v1/clusters/lab/upgrade-plan", headers=headers)
    views["POST /v1/clusters/lab/upgrade-plan"] = await dry_run.text()
    events = len(await env.call("GET", "/v1/events", 200, headers=headers))
    views[STREAM] = await read_stream(env, headers, events)
    return views


async def test_no_view_shows_a_machines_secrets_and_the_database_holds_none_in_the_clear(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    await env.register("node-a")
    await env.call("POST", "/v1/machines/node-a/approve", 200, json={"role": "manager"})
    (stored,) = await env.store.machines_by_hostname("node-a")
    secret = with_secrets(stored)
    await env.store.commit([secret])
    await env.coordinator.reconciler.reconcile_once()  # events about it, as a pass records them
    kept = await env.store.get_machine(stored.id)
    assert kept is not None and (kept.kubeconfig, kept.outputs) == (secret.kubeconfig,
                                                                    secret.outputs)

    reader = await env.call("POST", "/v1/admin-tokens", 201,
                            json={"name": "dashboard", "role": "read-only"})
    machine = {"id": stored.id, "hostname": stored.hostname}
    for headers in (env.admin, {"Authorization": f"Bearer {reader['token']}"}):
        views = await every_admin_view(env, headers, machine)
        assert "node-a" in views["/v1/machines/node-a"]  # the views did show the machine
        assert "node-a" in views["/v1/clusters/lab/status"]
        assert {path: leaked(text) for path, text in views.items() if leaked(text)} == {}

    stored_bytes = b"".join(path.read_bytes() for path in tmp_path.glob("coordinator.db*"))
    assert [s for s in SECRETS if s.encode() in stored_bytes] == []


# -- the key file ------------------------------------------------------------------------------


@pytest.fixture
async def initialized(tmp_path: Path) -> ServeOptions:
    """A data dir `coordinator init` made."""
    options = ServeOptions(tmp_path / "data")
    await initialize(options, ["127.0.0.1"], None, None, None)
    return options


async def test_init_makes_a_key_only_its_owner_may_read(initialized: ServeOptions) -> None:
    key = initialized.data_dir / FILE_NAME
    assert key.stat().st_mode & 0o777 == 0o600
    before = key.read_bytes()
    coordinator = await open_coordinator(initialized)  # as serve does: the key is kept
    await coordinator.store.close()
    assert key.read_bytes() == before


async def test_the_coordinator_refuses_to_start_on_a_key_others_may_read(
        initialized: ServeOptions) -> None:
    key = initialized.data_dir / FILE_NAME
    key.chmod(0o640)
    with pytest.raises(SetupError, match=f"{key} has mode 0640: only its owner may read"):
        await open_coordinator(initialized)


async def test_the_coordinator_refuses_to_start_on_another_key_than_its_databases(
        initialized: ServeOptions) -> None:
    """As a replica would, given a key of its own rather than a copy of the others'."""
    key = initialized.data_dir / FILE_NAME
    key.unlink()
    with pytest.raises(SetupError, match=f"cannot open the store: {key} is not the key this "
                                         "database's secrets are sealed with"):
        await open_coordinator(initialized)
