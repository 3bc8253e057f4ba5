"""A TCP relay on the loopback in front of a plain-HTTP server, losing answers as a network
or a crash would: while `losing` names a request's start, a connection whose first request
starts so gets the server's answer read and dropped, so the server did the work and the
client never hears of it. The connection closes when the server's side does."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class Relay:
    upstream_port: int
    losing: bytes | None = None  # e.g. b"POST /v1/agent/register"
    lost: int = 0  # connections whose answers were dropped
    _listener: socket.socket = field(
        default_factory=lambda: socket.create_server(("127.0.0.1", 0)), repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._listener.close()

    def accept(self) -> None:
        """Relay every connection, each in threads of its own, until the listener closes."""
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                client, _ = self._listener.accept()
                threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            first = client.recv(CHUNK)
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
                upstream.sendall(first)
                lose = self.losing is not None and first.startswith(self.losing)
                self.lost += lose
                threading.Thread(target=_pump, args=(client, upstream, False), daemon=True).start()
                _pump(upstream, client, lose)


def _pump(source: socket.socket, target: socket.socket, drop: bool) -> None:
    """Copy source to target (or read it and drop it) until source ends, then end target's."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            if not drop:
                target.sendall(chunk)
        target.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def relay(upstream_port: int, losing: bytes | None = None) -> Iterator[Relay]:
    """A relay to the server on upstream_port, accepting connections until the block ends."""
    running = Relay(upstream_port, losing)
    threading.Thread(target=running.accept, daemon=True).start()
    try:
        yield running
    finally:
        running.close()
