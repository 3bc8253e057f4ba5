"""The coordinator's listening sockets, with limits a client that opens connections and never
finishes a request cannot wear out (one held 20,000 TLS connections, a header line every 10 s,
until the process ran out of descriptors and every admin request failed).

aiohttp's TCPSite hands connections to the application's protocol only after the TLS handshake,
without saying who is connecting before then; so this site accepts connections itself and
decides at once, knowing the peer (asyncio's `sock_accept` and `connect_accepted_socket`):
- at most `per_address` connections open from one client address (an IPv6 /64);
- at most the descriptor limit less `reserve` open in all: the store, the PKI files and the
  logs always find a descriptor, and a connection beyond is closed at once, not left in the
  listen queue;
- the TLS handshake and the first request's headers within `header_seconds` of the accept
  (a connection closed for want of them is a refusal too, as one closed at once); bytes the
  client sent that wait unread in the socket count as come: the event loop runs its timers
  before it reads, so after a stall of the coordinator's own (a busy loop, a slow disk, a
  loaded machine) the deadline would otherwise close a connection whose request arrived in
  time, without a word (a Prometheus scrape saw "Remote end closed connection without
  response"); for a second at most once the loop runs again, so that a client trickling its
  headers gains no more than that;
- later requests on a kept-alive connection: aiohttp's keepalive_timeout (`idle_seconds`)
  closes a connection idle, or whose next request's headers are not complete, that long after
  its last answer; unread bytes hold it off as they hold off the first request's deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from coordinator.edge.connections import BODY_SECONDS, ConnectionCounts, client_of, too_slow

log = logging.getLogger(__name__)

ACCEPT_RETRY_SECONDS = 0.1  # after accept() failed for want of descriptors (or buffers)
ACCEPT_BATCH = 256  # connections accepted at once before the event loop gets a turn
UNREAD_RECHECK_SECONDS = 0.05  # a deadline met by bytes still unread: looked at again then,
UNREAD_GRACE_SECONDS = 1.0  # for this long at most from the deadline's first look (the loop
# running again): a trickling client gains no more than that
# uvloop's own handshake timeout, a backstop only: _Guarded holds the handshake to the deadline
# (uvloop's timer would cut a handshake whose client's last flight waits unread after a stall)
HANDSHAKE_BACKSTOP_SECONDS = 86400.0


@dataclass(frozen=True)
class ConnectionLimits:
    per_address: int = 1024  # 0: no bound per address (a fleet behind one NAT address)
    reserve: int = 256  # descriptors never given to connections
    header_seconds: float = 10.0
    # Above the agent's own idle limit (nodeagent/http_client.py IDLE_LIMIT, 60 s), so the
    # server is not the one to close an agent's idle connection as a request goes out.
    idle_seconds: float = 75.0
    body_seconds: float = BODY_SECONDS  # the API's (bodydeadline.py); here with its kin


def raise_descriptor_limit() -> int:
    """Raise the soft limit on open descriptors to the hard one (systemd's default soft limit
    is 1,024: about a thousand agents' connections); the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as exc:  # a seccomp filter refusing setrlimit, say
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, exc)
    return soft


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, wrapped: the connection is counted until it
    closes, and closed (a refusal the site is told of) if the first request's headers are not
    complete by the deadline (its TLS handshake included: the timer runs from the accept).
    One object with slots per connection: at 10,000 agents, every object a connection keeps
    is traversed by each full garbage collection."""

    __slots__ = ("client", "connection", "grace", "inner", "site", "tail", "timer",
                 "transport")

    def __init__(self, inner: asyncio.Protocol, deadline: float, site: GuardedSite,
                 client: str, connection: socket.socket) -> None:
        self.inner = inner
        self.site = site
        self.client: str | None = client  # None once released
        self.connection = connection
        self.grace: float | None = None  # until when unread bytes hold the deadline off
        self.transport: asyncio.BaseTransport | None = None
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_at(
            deadline, self._expire)
        self.tail = b""  # the last bytes of the headers so far: where their end may begin

    def release(self) -> None:
        """The connection no longer counts (whichever way it ended, once)."""
        if self.client is not None:
            self.site.counts.release(self.client)
            self.client = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            seen = self.tail + data
            if b"\r\n\r\n" in seen:
                self.timer.cancel()
                self.timer, self.tail = None, b""
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.release()
        self.inner.connection_lost(exc)

    def abandon(self) -> None:
        """Its TLS handshake failed or was cancelled: no deadline, no longer counted."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.release()

    def _expire(self) -> None:
        self.timer = None
        loop = asyncio.get_running_loop()
        self.grace = held_off(self.connection, self.grace, loop.time())
        if self.grace is not None:  # the client was on time; the loop has yet to read it
            self.timer = loop.call_later(UNREAD_RECHECK_SECONDS, self._expire)
            return
        if self.client is not None:  # logged first: the log has it once the client sees
            self.site.timed_out(self.client)  # the close
        if self.transport is not None:
            self.transport.abort()
        else:  # still in its TLS handshake, which now fails (_open closes the socket)
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)


class _KeptAlive(RequestHandler):
    """aiohttp's handler for one connection, its keep-alive deadline (a kept-alive connection
    idle, or its next request's headers not complete, `idle_seconds` after its last answer)
    held off by unread bytes as the first request's deadline is: aiohttp's timer closed a
    connection whose next request came in time, during a stall, unanswered."""

    __slots__ = ("connection", "grace")

    def __init__(self, server: web.Server, connection: socket.socket) -> None:
        # as server() makes its handlers, with the runner's settings (keepalive_timeout...)
        super().__init__(server, loop=asyncio.get_running_loop(), **server._kwargs)
        self.connection = connection
        self.grace: float | None = None  # until when unread bytes hold the deadline off

    def _process_keepalive(self) -> None:  # aiohttp's keep-alive timer
        loop = asyncio.get_running_loop()
        self.grace = held_off(self.connection, self.grace, loop.time())
        if self.grace is not None:
            self._keepalive_handle = loop.call_later(UNREAD_RECHECK_SECONDS,
                                                     self._process_keepalive)
            return
        super()._process_keepalive()


def held_off(connection: socket.socket, grace: float | None, now: float) -> float | None:
    """At a deadline of connection's: until when bytes its client sent, still unread, hold the
    deadline off (the event loop runs its timers before it reads: back from a stall, it would
    otherwise judge a client that was on time by what it has yet to read), counted from the
    deadline's first look (grace: None then, after it what this returned) for
    UNREAD_GRACE_SECONDS at most; None once the deadline holds."""
    until = now + UNREAD_GRACE_SECONDS if grace is None else grace
    return until if now < until and unread(connection) else None


def unread(connection: socket.socket) -> bool:
    """Whether bytes wait in connection's socket that the event loop has not read yet."""
    try:
        return bool(connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (BlockingIOError), or the connection is gone
        return False


class GuardedSite(web.BaseSite):
    """A TCPSite whose connections are held to ConnectionLimits."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int,
                 ssl_context: ssl.SSLContext | None, limits: ConnectionLimits,
                 descriptors: int,
                 refused: Callable[[str, str], None] = lambda client, why: None) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=1024)
        self.host, self.port, self.limits = host, port, limits
        # told (client, why) of each connection closed at once, or for want of its
        # handshake and headers in time
        self.refused = refused
        self.counts = ConnectionCounts(max(1, descriptors - limits.reserve), limits.per_address)
        self.sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        self.sockets = listening_sockets(self.host, self.port, self._backlog)
        for listener in self.sockets:
            self._spawn(self._accept(listener))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for listener in self.sockets:
            listener.close()
        await super().stop()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listener: socket.socket) -> None:
        """Every connection waiting, each time the listener is readable (as uvloop's own server
        does): one accept per turn of a busy event loop would leave new connections queued."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._admit(*await loop.sock_accept(listener))
                for _ in range(ACCEPT_BATCH):
                    self._admit(*listener.accept())
            except BlockingIOError:  # none left waiting
                continue
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: wait for descriptors to free
                log.warning("cannot accept a connection: %s", exc.strerror)
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)

    def _admit(self, connection: socket.socket, peer: Any) -> None:
        """Hand the connection on, or close it at once when its client has its share or the
        process has no descriptor to spare."""
        client = client_of(peer[0])
        refusal = self.counts.admit(client)
        if refusal is not None:
            connection.close()
            self.refused(client, refusal)
            return
        connection.setblocking(False)
        deadline = asyncio.get_running_loop().time() + self.limits.header_seconds
        self._spawn(self._open(connection, client, deadline))

    def timed_out(self, client: str) -> None:
        """A connection of client closed for want of its handshake and headers in time."""
        self.refused(client, too_slow(self.limits.header_seconds))

    async def _open(self, connection: socket.socket, client: str, deadline: float) -> None:
        """Hand the connection to aiohttp (after the TLS handshake); it stays counted until it
        closes, however it ends."""
        server = self._runner.server
        assert server is not None
        guarded = _Guarded(_KeptAlive(server, connection), deadline, self, client, connection)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: guarded, connection, ssl=self._ssl_context,
                ssl_handshake_timeout=HANDSHAKE_BACKSTOP_SECONDS if self._ssl_context else None)
        except OSError:  # a failed handshake (SSLError, ConnectionAbortedError): one the
            guarded.abandon()  # deadline cut _Guarded logged, one the client gave up on is no
            connection.close()  # refusal
        except asyncio.CancelledError:
            guarded.abandon()
            connection.close()
            raise


def listening_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address host resolves to (all interfaces for "", 0.0.0.0 is
    IPv4's, :: IPv6's), as asyncio's create_server binds them."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(socket.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)):
            listener = socket.socket(family, kind, proto)
            sockets.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(address)
            listener.listen(backlog)
            listener.setblocking(False)
    except OSError:
        for listener in sockets:
            listener.close()
        raise
    return sockets
