"""The exec action: argv run directly (no shell), in its own session so that a timeout or a
cancelled phase kills everything it started, not only the first process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from nodeagent.items import resolved_path
from nodeagent.items.outcome import ItemFailed, ItemOutcome
from nodeagent.wire.protocol import ExecAction, VersionAction, installed_version
from nodeagent.wire.templates import render

OUTPUT_TAIL_BYTES = 4096  # what an ItemReport carries
_READ_CHUNK = 1 << 16


class OutputTail:
    """The last OUTPUT_TAIL_BYTES of a stream of any length, in bounded memory."""

    def __init__(self) -> None:
        self._kept = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._kept += chunk
        del self._kept[:-OUTPUT_TAIL_BYTES]

    def text(self) -> str:
        return self._kept.decode(errors="replace")


# Sees a command's whole output, chunk by chunk as it is read (the tail keeps only its end).
Watch = Callable[[bytes], None]


async def run_exec(action: ExecAction, values: Mapping[str, str], root: Path,
                   timeout: float, watch: Watch) -> ItemOutcome:
    """Run the command to completion within timeout; its stdout and stderr are captured as
    one stream (in the order written), of which the tail is kept and all goes by watch. It
    runs on the real machine, but in root (or cwd under root), so relative paths land where
    file items write."""
    argv = [render(arg, values) for arg in action.argv]
    env = {**os.environ, **{name: render(value, values) for name, value in action.env.items()}}
    cwd = resolved_path(root, render(action.cwd, values)) if action.cwd else root
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        where = f" in {cwd}" if str(exc.filename) == str(cwd) else ""
        raise ItemFailed(f"cannot run {argv[0]}{where}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    tail = OutputTail()
    finished = False
    try:
        async with asyncio.timeout(timeout):
            while chunk := await proc.stdout.read(_READ_CHUNK):
                tail.feed(chunk)
                watch(chunk)
            code = await proc.wait()
        finished = True
    except TimeoutError:
        raise ItemFailed(
            f"{argv[0]} timed out after {timeout:g}s; its process group was killed",
            output=tail.text(),
        ) from None
    finally:
        if not finished:  # timed out or cancelled: stop the command and all it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    if code not in action.expected_exit_codes:
        expected = ", ".join(str(c) for c in action.expected_exit_codes)
        raise ItemFailed(f"{argv[0]} exited with {code} (expected {expected})", code, tail.text())
    return ItemOutcome(True, output=tail.text(), exit_code=code)


async def run_version(action: VersionAction, values: Mapping[str, str], root: Path,
                      timeout: float, watch: Watch) -> ItemOutcome:
    """Run the version command as exec would; fail unless the version it prints is the one
    declared, so that the item is retried (with backoff) until the rollout installed it."""
    outcome = await run_exec(ExecAction(type="exec", argv=action.argv), values, root, timeout,
                             watch)
    installed = installed_version(outcome.output)
    if installed != action.expect:
        raise ItemFailed(f"installed version {installed or '(none printed)'!r}, declared "
                         f"{action.expect!r}", outcome.exit_code, outcome.output)
    return outcome
