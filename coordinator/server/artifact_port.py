"""The artifact port (`serve --artifact-port`): artifact bytes over TLS from threads, one a
connection, on blocking sockets. The event loop encrypts everything it sends in its one
thread; here OpenSSL's SSL_write and the file reads release the GIL, so downloads use every
core and leave the event loop to the agents' requests (docs/architecture.md, "Artifact
bytes"). It serves only signed links the API's artifact route hands out (a 307 there after
authenticating the machine), one GET a connection, and holds no state.

Its limits, like the API port's (listener.py): at most MAX_CONNECTIONS open (more wait in the
listen queue), the TLS handshake and the request's headers within `header_seconds`, and each
send within SEND_SECONDS."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import ssl
import struct
import threading
import time
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from coordinator.domain import byteranges
from coordinator.domain.artifact_links import ArtifactLinks
from coordinator.domain.errors import NotFound
from coordinator.service.artifacts import locate
from nodeagent.validation import InvalidDocument

log = logging.getLogger(__name__)

PREFIX = "/v1/artifacts/"
CHUNK = 1 << 20  # read into a buffer of its own per connection, sent as TLS records
HEAD_BYTES = 16 * 1024  # a request's line and headers, at most
# Each a thread and a CHUNK buffer: 128 MiB at most. Connections beyond wait in the listen
# queue for one to end (an agent's download waits 90 s to be answered).
MAX_CONNECTIONS = 128
SEND_SECONDS = 60  # a client that takes no bytes that long is dropped
ACCEPT_RETRY_SECONDS = 0.1
REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 416: "Range Not Satisfiable",
           422: "Unprocessable Entity"}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ArtifactPort:
    """An accept thread for each listening socket; a thread for each connection."""

    def __init__(self, sockets: list[socket.socket], context: ssl.SSLContext, store: Path,
                 links: ArtifactLinks, header_seconds: float) -> None:
        self.sockets, self.context = sockets, context
        self.store, self.links, self.header_seconds = store, links, header_seconds
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> None:
        for listener in self.sockets:
            listener.setblocking(True)
            threading.Thread(target=self._accept, args=(listener,), daemon=True,
                             name="artifact-accept").start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            self.slots.acquire()  # a connection ending frees a slot
            try:
                connection, _ = listener.accept()
            except OSError as exc:  # EMFILE and the like: wait for descriptors to free
                log.warning("artifact port: cannot accept a connection: %s", exc.strerror)
                self.slots.release()
                time.sleep(ACCEPT_RETRY_SECONDS)
                continue
            threading.Thread(target=self._connection, args=(connection,), daemon=True,
                             name="artifact").start()

    def _connection(self, connection: socket.socket) -> None:
        try:
            connection.setblocking(True)
            connection.settimeout(self.header_seconds)
            with self.context.wrap_socket(connection, server_side=True) as tls:
                self._answer(tls)
        except (OSError, ValueError):  # a failed handshake, a reset, a timeout
            pass
        finally:
            connection.close()
            self.slots.release()

    def _answer(self, tls: ssl.SSLSocket) -> None:
        deadline = time.monotonic() + self.header_seconds
        head = b""
        while b"\r\n\r\n" not in head:
            left = deadline - time.monotonic()
            if len(head) > HEAD_BYTES or left <= 0:
                return
            tls.settimeout(left)
            data = tls.recv(HEAD_BYTES)
            if not data:
                return
            head += data
        # Blocking from here on, the kernel timing sends out: SSL_write then encrypts and
        # sends a whole CHUNK with the GIL released, instead of waking for each part of it.
        tls.settimeout(None)
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
