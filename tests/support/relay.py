"""A TCP relay on the loopback in front of a plain-HTTP server, losing answers as a network
or a crash would: while `losing` names a request's start, a connection whose first request
starts so gets the server's answer read and dropped, so the server did the work and the
client never hears of it (with `cut_after`, only what follows the answer's first cut_after
bytes, once: a download cut midway). The connection closes when the server's side does.
It notes each connection's first request and the bytes of answers it passed on."""

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
    cut_after: int | None = None  # bytes of a losing answer passed on before the cut
    # With cut_after: the server's answer is not read past the cut until this is set (a
    # transfer stalled mid-way, e.g. while the test restarts the server).
    hold: threading.Event | None = None
    # Each finished connection's first bytes and how many bytes of answers it passed on.
    answers: list[tuple[bytes, int]] = field(default_factory=list)
    _listener: socket.socket = field(
        default_factory=lambda: socket.create_server(("127.0.0.1", 0)), repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def passed(self, start: bytes) -> list[tuple[str, int]]:
        """The connections whose first request starts so: that request's head, and the bytes
        of answers passed on."""
        return [(first.decode("latin-1"), size) for first, size in self.answers
                if first.startswith(start)]

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
                limit, hold = (0 if lose else None), None
                if lose and self.cut_after is not None:
                    limit, self.cut_after, self.losing = self.cut_after, None, None
                    hold = self.hold
                threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
                self.answers.append((first, _pump(upstream, client, limit, hold)))


def _pump(source: socket.socket, target: socket.socket, limit: int | None = None,
          hold: threading.Event | None = None) -> int:
    """Copy source to target until source ends (at most limit bytes, the rest read and
    dropped, once hold is set if given), then end target's; the bytes passed on."""
    passed = 0
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            if limit is not None:
                chunk = chunk[:max(0, limit - passed)]
                if limit and not chunk and hold is not None:
                    hold.wait()  # stalled: neither side hears more until it is let go
                    hold = None
                elif limit and not chunk:  # cut: the client sees the connection end here
                    target.shutdown(socket.SHUT_WR)
            target.sendall(chunk)
            passed += len(chunk)
        target.shutdown(socket.SHUT_WR)
    return passed


@contextlib.contextmanager
def relay(upstream_port: int, losing: bytes | None = None) -> Iterator[Relay]:
    """A relay to the server on upstream_port, accepting connections until the block ends."""
    running = Relay(upstream_port, losing)
    threading.Thread(target=running.accept, daemon=True).start()
    try:
        yield running
    finally:
        running.close()
