"""A request body's deadline, from the end of its headers (docs/coordinator.md,
"Connections"): the listener holds a connection to its handshake and headers, aiohttp to its
idle time, and nothing else to a body sent a byte at a time (a handler reading it would wait
for ever). The timer checks the body's progress against its allowance
(edge/connections.py) and, once it is out, makes the handler's read fail: the request is
answered 408 and its connection closed."""

from __future__ import annotations

import asyncio

from aiohttp import web

from coordinator.edge.connections import body_allowance, body_too_slow


class BodyTimedOut(asyncio.TimeoutError):
    """A body not complete within its allowance. A TimeoutError: aiohttp, draining what is
    left of a body after the answer, then closes the connection without a word."""


class BodyDeadline:
    """The timer of one request's body; cancel() once its handler has returned."""

    __slots__ = ("content", "grace", "started", "timer")

    def __init__(self, request: web.Request, grace: float) -> None:
        loop = asyncio.get_running_loop()
        self.content = request.content
        self.grace = grace
        self.started = loop.time()
        self.timer: asyncio.TimerHandle | None = loop.call_at(self.started + grace, self._check)

    def _check(self) -> None:
        self.timer = None
        if self.content.is_eof():  # all of it came, read or not
            return
        allowed = body_allowance(self.grace, self.content.total_bytes)
        loop = asyncio.get_running_loop()
        if loop.time() < self.started + allowed:  # it came on meanwhile
            self.timer = loop.call_at(self.started + allowed, self._check)
            return
        self.content.set_exception(BodyTimedOut(body_too_slow(allowed)))

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
