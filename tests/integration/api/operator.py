"""What an operator reads in the integration tests of the API (waiting and the CLI are the
harness's: InProcessCoordinator.until and .cli)."""

from __future__ import annotations

from typing import Any

from tests.support.harness import InProcessCoordinator


async def machine(env: InProcessCoordinator, hostname: str) -> dict[str, Any]:
    return await env.call("GET", f"/v1/machines/{hostname}", 200)  # type: ignore[no-any-return]
