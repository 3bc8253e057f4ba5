"""The artifact port (`serve --artifact-port`): artifact bytes over TLS from threads, one a
download, on blocking sockets. The event loop encrypts everything it sends in its one
thread; here OpenSSL's SSL_write and the file reads release the GIL, so downloads use every
core and leave the event loop to the agents' requests (docs/architecture.md, "Artifact
bytes"). It serves only signed links the API's artifact route hands out (a 307 there after
authenticating the machine), one GET a connection, and holds no state.

Its limits are the API port's (listener.py), so that a client with no link cannot delay a
download (386 idle connections once held its 128 threads through their handshakes, and a
valid download waited 30 s): one thread takes every connection and walks each through its
TLS handshake and request headers, non-blocking, all at once; it keeps at most
`per_address` open from one client and the descriptor limit less `reserve` in all (beyond
either: closed at once), and closes one whose handshake and headers take longer than
`header_seconds` from its accept. Only a connection whose request is read is handed to one of
MAX_DOWNLOADS threads (more wait for one), and each send there is held to SEND_SECONDS.
Refused and timed-out connections are logged at info as the API port's are: the first of an
address each minute at once, each minute's count after it."""

from __future__ import annotations

import io
import json
import logging
import os
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from coordinator.domain.errors import NotFound
from coordinator.domain.machines.refusals import CONNECTION, RefusalTally
from coordinator.edge import byteranges
from coordinator.edge.artifact_links import ArtifactLinks
from coordinator.edge.connections import ConnectionCounts, client_of, too_slow
from coordinator.server.listener import ConnectionLimits
from coordinator.service.artifacts import locate
from coordinator.service.eventlog import log_events
from coordinator.service.refusalaudit import AUDIT_WINDOW_SECONDS, note_refusal
from nodeagent.wire.validation import InvalidDocument

log = logging.getLogger(__name__)

PREFIX = "/v1/artifacts/"
CHUNK = 1 << 20  # read into a buffer of its own per download, sent as TLS records
HEAD_BYTES = 16 * 1024  # a request's line and headers, at most
# Each a thread and a CHUNK buffer: 128 MiB at most. Requests beyond wait for one to end (an
# agent's download waits 90 s to be answered); only requests read whole take one.
MAX_DOWNLOADS = 128
SEND_SECONDS = 60  # a client that takes no bytes that long is dropped
ACCEPT_RETRY_SECONDS = 0.1
REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 416: "Range Not Satisfiable",
           422: "Unprocessable Entity"}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class _Arriving:
    """A connection between its accept and its request's last header line."""

    tls: ssl.SSLSocket
    client: str
    deadline: float
    head: bytes = b""
    shaken: bool = False  # its TLS handshake is done
    done: bool = False  # handed to a download thread, or closed
    events: int = selectors.EVENT_READ  # what the selector waits for


class ArtifactPort:
    """The front thread (accepts, handshakes, headers, for all connections) and the download
    threads."""

    def __init__(self, sockets: list[socket.socket], context: ssl.SSLContext, store: Path,
                 links: ArtifactLinks, limits: ConnectionLimits, descriptors: int) -> None:
        self.sockets, self.context = sockets, context
        self.store, self.links, self.limits = store, links, limits
        self.counts = ConnectionCounts(max(1, descriptors - limits.reserve), limits.per_address)
        self.counting = threading.Lock()  # the front thread admits, any thread releases
        self.selector = selectors.DefaultSelector()
        self.arriving: deque[_Arriving] = deque()  # in accept order, so by deadline
        self.requests: queue.SimpleQueue[tuple[ssl.SSLSocket, str, bytes]] = queue.SimpleQueue()
        self.tally = RefusalTally()

    def start(self) -> None:
        for listener in self.sockets:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ)
        threading.Thread(target=self._front, daemon=True, name="artifact-front").start()
        for _ in range(MAX_DOWNLOADS):
            threading.Thread(target=self._download, daemon=True, name="artifact").start()

    def _front(self) -> None:
        try:
            self._serve_front()
        except Exception:  # a bug: without this thread the port is dead, so is the process
            log.exception("artifact port: the thread taking connections failed")
            os._exit(1)  # the coordinator starts it again

    def _serve_front(self) -> None:
        audit = time.monotonic() + AUDIT_WINDOW_SECONDS
        while True:
            now = time.monotonic()
            if now >= audit:
                log_events(self.tally.drain(time.time()))
                audit = now + AUDIT_WINDOW_SECONDS
            wait = min(self._expire(now), audit - now)
            for key, _ in self.selector.select(wait):
                if key.data is None:
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._advance(key.data)

    def _expire(self, now: float) -> float:
        """Close the connections past their deadline; seconds until the next one's. What a
        connection's client sent by now counts, read or not: back from a stall of this
        process (SIGSTOP, a loaded machine), select() returns nothing once its timeout has
        passed, so a request that came during the stall waits unread here; it is read
        before the deadline judges."""
        while self.arriving and (self.arriving[0].done or self.arriving[0].deadline <= now):
            late = self.arriving.popleft()
            if not late.done:
                self._advance(late)
            if not late.done:  # logged first: the log has it once the client sees the close
                self._refused(late.client, too_slow(self.limits.header_seconds))
                self._close(late)
        return self.arriving[0].deadline - now if self.arriving else self.limits.header_seconds

    def _accept(self, listener: socket.socket) -> None:
        """Every connection waiting: admitted and its handshake begun, or closed at once."""
        while True:
            try:
                connection, peer = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE and the like: wait for descriptors to free
                log.warning("artifact port: cannot accept a connection: %s", exc.strerror)
                time.sleep(ACCEPT_RETRY_SECONDS)
                return
            client = client_of(peer[0])
            with self.counting:
                refusal = self.counts.admit(client)
            if refusal is not None:
                connection.close()
                self._refused(client, refusal)
                continue
            connection.setblocking(False)
            try:
                tls = self.context.wrap_socket(connection, server_side=True,
                                               do_handshake_on_connect=False)
            except OSError:  # reset already (ENOTCONN)
                connection.close()
                self._release(client)
                continue
            arriving = _Arriving(tls, client, time.monotonic() + self.limits.header_seconds)
            self.arriving.append(arriving)
            self.selector.register(arriving.tls, arriving.events, arriving)
            self._advance(arriving)

    def _advance(self, arriving: _Arriving) -> None:
        """As far as its bytes so far go: the handshake, then the headers; once they are
        whole, the request goes to a download thread."""
        tls = arriving.tls
        try:
            if not arriving.shaken:
                tls.do_handshake()
                arriving.shaken = True
            while b"\r\n\r\n" not in arriving.head:
                data = tls.recv(HEAD_BYTES)
                if not data or len(arriving.head) > HEAD_BYTES:
                    raise ConnectionAbortedError
                arriving.head += data
        except ssl.SSLWantReadError:
            self._wait_for(arriving, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._wait_for(arriving, selectors.EVENT_WRITE)
            return
        except (OSError, ValueError):  # a failed handshake, a reset, a client gone
            self._close(arriving)
            return
        arriving.done = True
        self.selector.unregister(tls)
        self.requests.put((tls, arriving.client, arriving.head))

    def _wait_for(self, arriving: _Arriving, events: int) -> None:
        if arriving.events != events:
            arriving.events = events
            self.selector.modify(arriving.tls, events, arriving)

    def _close(self, arriving: _Arriving) -> None:
        arriving.done = True
        self.selector.unregister(arriving.tls)
        arriving.tls.close()
        self._release(arriving.client)

    def _release(self, client: str) -> None:
        with self.counting:
            self.counts.release(client)

    def _refused(self, client: str, why: str) -> None:
        """Counted and logged as the API port's refusals are (the log only: this process has
        no store)."""
        note_refusal(self.tally, time.time(), client, 0, why, "", "", CONNECTION)

    def _download(self) -> None:
        while True:
            tls, client, head = self.requests.get()
            try:
                tls.setblocking(True)
                self._answer(tls, head)
            except (OSError, ValueError):  # a reset, a client that stopped taking bytes
                pass
            except Exception:  # a bug: this request fails, the thread serves the next
                log.exception("artifact port: answering a request failed")
            finally:
                tls.close()
                self._release(client)

    def _answer(self, tls: ssl.SSLSocket, head: bytes) -> None:
        # Blocking, the kernel timing sends out: SSL_write then encrypts and sends a whole
        # CHUNK with the GIL released, instead of waking for each part of it.
        tls.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_SECONDS, 0))
        try:
            method, target, headers = _parse(head.partition(b"\r\n\r\n")[0])
            self._send(tls, method, target, headers)
        except _Refused as refused:
            _reply(tls, refused.status, {"Content-Type": "application/json"},
                   json.dumps({"error": str(refused)}).encode())

    def _send(self, tls: ssl.SSLSocket, method: str, target: str,
              headers: dict[str, str]) -> None:
        if method not in ("GET", "HEAD"):
            raise _Refused(405, f"{method}: the artifact port serves only GET and HEAD")
        url = urlsplit(target)
        if not url.path.startswith(PREFIX):
            raise _Refused(404, "the artifact port serves only /v1/artifacts/NAME")
        name = unquote(url.path[len(PREFIX):])
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if not self.links.valid(name, query.get("expires", ""), query.get("signature", ""),
                                time.time()):
            raise _Refused(403, "this artifact link is not valid or has expired: GET "
                                f"{PREFIX}NAME from the coordinator's API again")
        try:
            path = locate(self.store, name)
        except NotFound as exc:
            raise _Refused(404, str(exc)) from None
        except InvalidDocument as exc:
            raise _Refused(422, str(exc)) from None
        with open(path, "rb", buffering=0) as file:
            version = os.fstat(file.fileno())
            etag = byteranges.etag_of(version.st_mtime_ns, version.st_size)
            modified = formatdate(version.st_mtime, usegmt=True)
            chosen = byteranges.select(version.st_size, headers.get("range"),
                                       headers.get("if-range"), etag, modified)
            fields = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                      "ETag": etag, "Last-Modified": modified}
            if chosen.status == 416:
                fields["Content-Range"] = f"bytes */{version.st_size}"
                _reply(tls, 416, fields, b"")
                return
            if chosen.status == 206:
                fields["Content-Range"] = \
                    f"bytes {chosen.start}-{chosen.stop - 1}/{version.st_size}"
            _reply(tls, chosen.status, fields, b"", chosen.stop - chosen.start)
            if method == "GET":
                _copy(file, tls, chosen.start, chosen.stop - chosen.start)


def _parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    """The request line's method and target, and the headers by lower-case name."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ")
    except ValueError:
        raise _Refused(400, "not an HTTP request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise _Refused(400, f"a header line without a colon: {line[:40]!r}")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


def _reply(tls: ssl.SSLSocket, status: int, fields: dict[str, str], body: bytes,
           length: int | None = None) -> None:
    lines = [f"HTTP/1.1 {status} {REASONS[status]}",
             f"Content-Length: {len(body) if length is None else length}",
             "Connection: close", *(f"{name}: {value}" for name, value in fields.items())]
    tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


def _copy(file: io.FileIO, tls: ssl.SSLSocket, start: int, count: int) -> None:
    """count bytes of the file from start, through one reused buffer; a file cut short ends
    the connection short of Content-Length, which the client sees."""
    buffer = memoryview(bytearray(CHUNK))
    os.lseek(file.fileno(), start, os.SEEK_SET)
    while count > 0:
        read = file.readinto(buffer[:min(CHUNK, count)])
        if not read:
            return
        tls.sendall(buffer[:read])
        count -= read
