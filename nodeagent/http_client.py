"""The agent's HTTP client: the standard library's urllib, each call in its own daemon thread.

Not aiohttp: on a node the agent sits idle almost all the time, making a request every few
seconds at most, and aiohttp alone would be a third of its resident memory (see
bench/agent_idle.py). Daemon threads, not an executor, so that a parked long-poll never holds
up the agent's shutdown. Proxies are always given explicitly (see nodeagent/proxy.py), never
read from the environment here.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

CHUNK = 1 << 18


class TransportError(Exception):
    """No HTTP answer: refused, reset, timed out or garbled."""


class BadStatus(Exception):
    """A streamed download answered with something other than 200."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason
        super().__init__(f"HTTP {status} {reason}")


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    body: bytes


async def in_thread(call: Callable[..., T], *args: Any) -> T:
    """Run a blocking call in a fresh daemon thread. A cancelled caller stops waiting at once;
    the thread finishes on its own and whatever it returns is closed."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            close = getattr(result, "close", None)
            if close is not None:
                close()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (call(*args), None)
        except Exception as exc:
            outcome = (None, exc)
        # RuntimeError: the loop closed meanwhile, and nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, daemon=True).start()
    return await future


def _opener(proxy: str | None, context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    # An explicit (possibly empty) mapping: urllib then never consults HTTP(S)_PROXY itself.
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}),
        urllib.request.HTTPSHandler(context=context))


def _describe(exc: BaseException) -> str:
    """'ConnectionRefusedError: Connection refused' rather than urllib's wrapped repr."""
    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    return f"{type(cause).__name__}: {getattr(cause, 'strerror', None) or cause}"


def _open(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
          proxy: str | None, timeout: float,
          context: ssl.SSLContext | None) -> http.client.HTTPResponse:
    """The response of one request, whatever its status; HTTP errors come back as responses."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        return _opener(proxy, context).open(request, timeout=timeout)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        return exc  # type: ignore[return-value]  # an HTTPError is also the response
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(_describe(exc)) from None


def _read(response: http.client.HTTPResponse, size: int = -1) -> bytes:
    try:
        return response.read(size)
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"while reading the body: {_describe(exc)}") from None


def _exchange(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
              proxy: str | None, timeout: float, context: ssl.SSLContext | None) -> Reply:
    with _open(method, url, headers, body, proxy, timeout, context) as response:
        return Reply(response.status, response.reason or "", _read(response))


async def request(method: str, url: str, *, headers: Mapping[str, str] | None = None,
                  body: bytes | None = None, proxy: str | None = None,
                  timeout: float = 10.0, context: ssl.SSLContext | None = None) -> Reply:
    """One request and its whole answer. `timeout` bounds each connect and read, so a
    long-poll gives its wait plus a margin. `context` says whom to trust over https (default:
    the system's CAs)."""
    return await in_thread(_exchange, method, url, headers or {}, body, proxy, timeout, context)


async def stream(url: str, *, headers: Mapping[str, str] | None = None,
                 proxy: str | None = None, timeout: float = 30.0,
                 context: ssl.SSLContext | None = None) -> AsyncIterator[bytes]:
    """GET a body chunk by chunk; BadStatus when the answer is not 200."""
    response = await in_thread(_open, "GET", url, headers or {}, None, proxy, timeout, context)
    try:
        if response.status != 200:
            raise BadStatus(response.status, response.reason or "")
        while chunk := await in_thread(_read, response, CHUNK):
            yield chunk
    finally:
        response.close()
