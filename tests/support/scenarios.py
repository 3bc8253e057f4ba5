"""Set-ups several API test modules share, built on the in-process harness; like a test, they
call the service directly where they need a reconcile pass at a given moment."""

from __future__ import annotations

from typing import Any

from tests.support.driver import Registered
from tests.support.harness import InProcessCoordinator


async def approved_workers(env: InProcessCoordinator, count: int,
                           admin: InProcessCoordinator | None = None
                           ) -> tuple[list[Registered], dict[str, Any]]:
    """count workers registered at env and approved (through admin, e.g. another replica),
    after a reconcile pass at env: their agents, and the first item they are assigned."""
    agents = [await env.register(f"w{n:02}") for n in range(count)]
    for agent in agents:
        await (admin or env).call("POST", f"/v1/machines/{agent['machine_id']}/approve", 200,
                                  json={"role": "worker"})
    await env.coordinator.reconciler.reconcile_once()
    return agents, (await env.assignment(agents[0]))["items"][0]
