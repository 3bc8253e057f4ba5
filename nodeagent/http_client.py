"""The agent's HTTP client: the standard library's http.client, each call in its own daemon
thread.

Calls to the coordinator (request()) keep their connections alive and reuse them: a heartbeat
every 10 s that opened a new TCP + TLS connection each time would cost the coordinator a TLS
handshake per heartbeat, far more CPU than answering it (at 10,000 agents, more than its whole
budget). Downloads (open_body()) go to arbitrary URLs that may redirect: urllib, one connection
each.

Not aiohttp: on a node the agent sits idle almost all the time, making a request every few
seconds at most, and aiohttp alone would be a third of its resident memory (see
bench/agent_idle.py). Daemon threads, not an executor, so that a parked long-poll never holds
up the agent's shutdown. Proxies are always given explicitly (see nodeagent/proxy.py), never
read from the environment here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import select
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar
from urllib.parse import unquote, urlsplit

T = TypeVar("T")

CHUNK = 1 << 18

# The coordinator's server (aiohttp) closes a keep-alive connection after 75 s idle. The agent
# drops its own well before, so it never sends on a connection the server is closing that very
# moment (a retry would cover that race, but need not be the usual path).
IDLE_LIMIT = 60.0
# Idle connections kept per destination: one. A report made while the long-poll is parked needs
# a second connection, but once both are idle one is closed, so an idle agent holds a single
# connection to its coordinator (the poll is its heartbeat: wire/heartbeat.py), and the
# coordinator a single TLS session per agent.
IDLE_PER_DESTINATION = 1


class TransportError(Exception):
    """No HTTP answer: refused, reset, timed out or garbled."""


class BadStatus(Exception):
    """A streamed download answered with something other than 200 (or 206 for a range)."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason
        super().__init__(f"HTTP {status} {reason}")


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # case-insensitive, as sent


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


def _read(response: http.client.HTTPResponse, size: int | None = None) -> bytes:
    try:
        return response.read(size)
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"while reading the body: {_describe(exc)}") from None


# What a request sends: bytes, or a file read in blocks as it is sent (an etcd snapshot, whose
# Content-Length the caller gives).
RequestBody = bytes | BinaryIO | None

# scheme, host, port, proxy, TLS context: the connections that can carry a request.
Destination = tuple[str, str, int, str | None, ssl.SSLContext | None]


@dataclass(frozen=True)
class _Route:
    """Where a request goes and what its request line names."""

    destination: Destination
    address: tuple[str, int]  # what to connect to: the server, or the proxy
    target: str  # the path and query; the whole URL when an HTTP proxy forwards it
    headers: dict[str, str] = field(default_factory=dict)  # the proxy's, on each request
    tunnel_headers: dict[str, str] | None = None  # CONNECT through the proxy with these


def _route(url: str, proxy: str | None, context: ssl.SSLContext | None) -> _Route:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    if scheme == "http" and context is not None:  # a CA to verify by: never in clear text
        raise ValueError(f"not sent to {url}: plain HTTP, for a call to be verified by a CA")
    port = parts.port or (443 if scheme == "https" else 80)
    destination = (scheme, parts.hostname, port, proxy, context)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if proxy is None:
        return _Route(destination, (parts.hostname, port), path)
    via = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    if not via.hostname:
        raise ValueError(f"proxy {proxy!r} names no host")
    auth = {}
    if via.username is not None:  # user:password@, sent as urllib sends it
        userinfo = f"{unquote(via.username)}:{unquote(via.password or '')}"
        auth["Proxy-Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
    address = via.hostname, via.port or 80
    if scheme == "http":  # absolute-form: the proxy forwards it
        return _Route(destination, address, parts._replace(fragment="").geturl(), auth)
    return _Route(destination, address, path, tunnel_headers=auth)


def _connect(route: _Route, timeout: float) -> http.client.HTTPConnection:
    """A new connection, not yet open: it connects (and tunnels) on its first request."""
    scheme, host, port, _, context = route.destination
    if scheme == "http":
        return http.client.HTTPConnection(*route.address, timeout=timeout)
    connection = http.client.HTTPSConnection(*route.address, timeout=timeout, context=context)
    if route.tunnel_headers is not None:
        connection.set_tunnel(host, port, headers=route.tunnel_headers)
    return connection


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """An idle connection with something to read has been closed by the server (or holds
    bytes nobody asked for): either way it cannot carry a request."""
    if connection.sock is None:
        return True
    poller = select.poll()
    poller.register(connection.sock, select.POLLIN)
    return bool(poller.poll(0))


class _Pool:
    """Idle keep-alive connections by destination, shared by the calls' threads. A call takes
    a connection for itself (concurrent calls each get their own) and gives it back only once
    the whole answer was read and the server did not ask to close it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Destination, list[tuple[float, http.client.HTTPConnection]]] = {}

    def take(self, destination: Destination) -> http.client.HTTPConnection | None:
        """The most recently used idle connection to destination still open, if any."""
        while True:
            with self._lock:
                expired = self._expire()
                idle = self._idle.get(destination)
                connection = idle.pop()[1] if idle else None
            for old in expired:
                old.close()
            if connection is None or not _closed_by_peer(connection):
                return connection
            connection.close()

    def give(self, destination: Destination, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(destination, [])
            idle.append((time.monotonic(), connection))
            surplus = [old for _, old in idle[:-IDLE_PER_DESTINATION]]
            del idle[:-IDLE_PER_DESTINATION]
        for old in surplus:
            old.close()

    def _expire(self) -> list[http.client.HTTPConnection]:
        """Forget connections idle past IDLE_LIMIT, of every destination (a one-off one such as
        the CA fetch's is not kept open for good); the caller closes them."""
        horizon = time.monotonic() - IDLE_LIMIT
        expired = []
        for destination, idle in list(self._idle.items()):
            expired += [connection for since, connection in idle if since < horizon]
            idle[:] = [(since, connection) for since, connection in idle if since >= horizon]
            if not idle:
                del self._idle[destination]
        return expired


_pool = _Pool()


class _Dropped(Exception):
    """A reused connection the server had closed: it never saw the request."""


def _answer(connection: http.client.HTTPConnection, route: _Route, method: str,
            headers: Mapping[str, str], body: RequestBody, timeout: float,
            reused: bool, keep: bool) -> Reply:
    """Send the request on connection and read the whole answer; the connection goes back to
    the pool if the caller keeps it and the server keeps it open. A file body is sent from its
    start, also when it is sent again on a new connection."""
    try:
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        if body is not None and not isinstance(body, bytes):
            body.seek(0)
        try:
            connection.request(method, route.target, body, {**route.headers, **headers})
        except (BrokenPipeError, ConnectionResetError):
            if body is None or isinstance(body, bytes):
                raise
            # A file the server refused before reading it all (413, say): it answered, then
            # closed. Its answer says why, which a broken pipe does not.
        response = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        # Reset or closed before a byte of the answer came: the server closed the idle
        # connection as the request went out. What urllib3 retries, too.
        if reused and isinstance(exc, (ConnectionError, ssl.SSLEOFError)):
            raise _Dropped from None
        raise TransportError(_describe(exc)) from None
    try:
        data = _read(response)
    except TransportError:
        connection.close()
        raise
    if response.will_close or not keep:
        connection.close()
    else:
        _pool.give(route.destination, connection)
    return Reply(response.status, response.reason or "", data, response.headers)


def _exchange(method: str, url: str, headers: Mapping[str, str], body: RequestBody,
              proxy: str | None, timeout: float, context: ssl.SSLContext | None,
              keep: bool) -> Reply:
    """On an idle connection if there is one; once more on a new one if that turns out to
    have been closed by the server."""
    try:
        route = _route(url, proxy, context)
    except ValueError as exc:
        raise TransportError(str(exc)) from None
    idle = _pool.take(route.destination)
    if idle is not None:
        with contextlib.suppress(_Dropped):
            return _answer(idle, route, method, headers, body, timeout, True, keep)
    return _answer(_connect(route, timeout), route, method, headers, body, timeout, False,
                   keep)


async def request(method: str, url: str, *, headers: Mapping[str, str] | None = None,
                  body: RequestBody = None, proxy: str | None = None,
                  timeout: float = 10.0, context: ssl.SSLContext | None = None,
                  keep_alive: bool = True) -> Reply:
    """One request and its whole answer, on a kept-alive connection to the same destination
    when one is idle. `timeout` bounds each connect and read, so a long-poll gives its wait
    plus a margin. `context` says whom to trust over https (default: the system's CAs); a
    call given one is never sent to a plain-HTTP URL (TransportError: nothing was sent).
    keep_alive=False closes the connection after a one-off call that nothing will follow."""
    return await in_thread(_exchange, method, url, headers or {}, body, proxy, timeout, context,
                           keep_alive)


@dataclass
class Body:
    """An opened download: what its first byte's offset is (0 for a whole body, N when a
    `Range: bytes=N-` was honoured with 206), what tells this version of the file from
    another (a strong ETag, else Last-Modified), and its bytes."""

    status: int
    start: int
    validator: str | None
    chunks: AsyncIterator[bytes]


def range_start(content_range: str) -> int:
    """Where a 206's bytes start (Content-Range: bytes START-END/SIZE); -1 when unreadable."""
    unit, _, rest = content_range.partition(" ")
    first = rest.partition("-")[0]
    return int(first) if unit == "bytes" and first.isdigit() else -1


def validator_of(headers: Mapping[str, str]) -> str | None:
    """What If-Range may name: a strong ETag (a weak one may not be used there), else the
    Last-Modified date."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


class _Chunks:
    """A response's body as an async iterator that closes the response at its end or when
    closed early (an async generator never started would not run its finally)."""

    def __init__(self, response: http.client.HTTPResponse) -> None:
        self._response = response

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = await in_thread(_read, self._response, CHUNK)
        if not chunk:
            short = self._response.length  # what Content-Length promised and never came
            self._response.close()
            if short:
                raise TransportError(f"the connection closed {short} bytes short of the end")
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self._response.close()


async def open_body(url: str, *, headers: Mapping[str, str] | None = None,
                    proxy: str | None = None, timeout: float = 30.0,
                    context: ssl.SSLContext | None = None) -> Body:
    """GET a body to stream chunk by chunk (its chunks close the response once read or
    closed); BadStatus when the answer is neither 200 nor 206."""
    response = await in_thread(_open, "GET", url, headers or {}, None, proxy, timeout, context)
    if response.status not in (200, 206):
        response.close()
        raise BadStatus(response.status, response.reason or "")
    start = 0 if response.status == 200 else range_start(response.headers.get("Content-Range", ""))
    return Body(response.status, start, validator_of(response.headers), _Chunks(response))
