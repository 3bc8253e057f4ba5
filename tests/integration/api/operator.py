"""What an operator does in the integration tests of the API: wait for the cluster to get
somewhere (with the reconcile passes a running coordinator makes), read a machine, run the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from click.testing import CliRunner

from coordinator.cli import main
from tests.support.harness import InProcessCoordinator
from tests.support.waiting import wait_until_async


async def until(env: InProcessCoordinator, what: str, predicate: Callable[[], Awaitable[bool]],
                timeout: float = 15) -> None:
    """predicate true, with a reconcile pass after every time it is not."""
    async def settled() -> bool:
        if await predicate():
            return True
        await env.coordinator.reconciler.reconcile_once()
        return False

    await wait_until_async(settled, timeout, what, interval=0.05)


async def machine(env: InProcessCoordinator, hostname: str) -> dict[str, Any]:
    return await env.call("GET", f"/v1/machines/{hostname}", 200)  # type: ignore[no-any-return]


async def cli(env: InProcessCoordinator, *args: str, token: str | None = None,
              exit_code: int = 0) -> str:
    """The CLI's output (its errors too), as the admin (or with the given token); it must
    exit with exit_code."""
    url = str(env.client.make_url("")).rstrip("/")
    result = await asyncio.to_thread(CliRunner().invoke, main, [
        "--url", url, "--token", token or env.admin["Authorization"].split()[1], *args])
    assert result.exit_code == exit_code, result.output
    return result.output
