"""Bounded waiting for something that happens on its own time (a process coming up, a machine
reaching a state): one helper, in a blocking and an asyncio flavour, so that every wait in the
tests, the bench scripts and the demo fails the same way, naming what did not happen."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
# What did not happen: a text, or a function that says it at the time (e.g. with a log's tail).
Message = str | Callable[[], str]


def _timed_out(message: Message, timeout: float, last: object) -> AssertionError:
    text = message if isinstance(message, str) else message()
    return AssertionError(f"{text} not within {timeout:g}s (last: {last!r})")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, message: Message = "the condition",
               interval: float = 0.05, ignoring: tuple[type[Exception], ...] = ()) -> T:
    """Call predicate until it returns something true and return that; after timeout seconds
    fail with an AssertionError naming message and the last answer. An exception of a type in
    ignoring counts as a false answer (e.g. a server that does not answer yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last: object = predicate()
        except ignoring as error:
            last = error
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise _timed_out(message, timeout, last)
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], timeout: float = 10.0,
                           message: Message = "the condition", interval: float = 0.01) -> T:
    """wait_until inside an event loop: predicate may be a plain or an async function, and the
    loop runs between two calls."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise _timed_out(message, timeout, last)
        await asyncio.sleep(interval)
