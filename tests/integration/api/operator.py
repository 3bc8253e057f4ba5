"""What an operator reads in the integration tests of the API (waiting and the CLI are the
harness's: InProcessCoordinator.until and .cli), and the check that a machine's note and
remedy read the same in every view."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from tests.support.harness import COORDINATOR, InProcessCoordinator
from tests.support.terminal import in_terminal, read_terminal


async def machine(env: InProcessCoordinator, hostname: str) -> dict[str, Any]:
    return await env.call("GET", f"/v1/machines/{hostname}", 200)  # type: ignore[no-any-return]


async def shown_everywhere(env: InProcessCoordinator, hostname: str, text: str,
                           remedy: str) -> None:
    """The machine's note starts with text and its remedy is remedy, in the API's machine,
    and both show in `status`, `status --watch`, `machines` and `machines get`."""
    note = (await machine(env, hostname))["note"]
    assert note["text"].startswith(text) and note["remedy"] == remedy, note
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert [m["note"]["remedy"] for m in status["machines"] if m["hostname"] == hostname] == [remedy]
    for command in (("status", "lab"), ("machines",), ("machines", "get", hostname)):
        shown = flat(await env.cli(*command))
        assert text in shown and remedy in shown, (command, shown)
    assert text in await watched(env, remedy[-40:])


def flat(text: str) -> str:
    """text with each run of whitespace one space: a note rich folded over lines reads whole."""
    return " ".join(text.split())


async def watched(env: InProcessCoordinator, until: str) -> str:
    """`status lab --watch` in a wide terminal until `until` is on its screen: the screen."""
    url = str(env.client.make_url("")).rstrip("/")
    watch, main = in_terminal([COORDINATOR, "--url", url, "--token",
                               env.admin["Authorization"].split()[1], "status", "lab", "--watch",
                               "--interval", "0.3"], 1000)
    try:
        return await asyncio.to_thread(read_terminal, main, until)
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=10)
        os.close(main)
