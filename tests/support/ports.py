"""Free loopback ports and bounded waiting for a component to come up."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    """A port nothing is bound to on host right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 10.0,
               interval: float = 0.05) -> None:
    """Poll ready() until it is true; fail naming what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready within {timeout:g}s")
        time.sleep(interval)


async def soon(what: str, ready: Callable[[], bool], timeout: float = 5.0) -> float:
    """wait_until for async tests: seconds until ready() is true; fails naming what after
    timeout."""
    start = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not within {timeout}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - start
