"""A server process a test starts itself: its output in a log, up once a probe says so,
stopped (terminate, then kill) on exit."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tests.support.waiting import wait_until

# How long a server may take to come up. Generous: a server that fails exits and fails the
# wait at once, while on a loaded machine (load 15 on 2 cores) the coordinator's start, a
# second of imports when quiet, took over 30 s.
STARTUP_TIMEOUT = 120.0


@contextlib.contextmanager
def serving(argv: Sequence[str], log: Path, up: Callable[[], bool], what: str,
            timeout: float = STARTUP_TIMEOUT, interval: float = 0.05
            ) -> Iterator[subprocess.Popen[bytes]]:
    """Start argv with its output in log; yield once up() is true; fail naming what, with the
    log, if it exits first or is not up within timeout seconds."""
    with log.open("ab") as out:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{what} exited with {proc.returncode}: {log.read_text()}")
            return up()

        wait_until(ready, timeout, what, interval=interval)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
