"""A server process stalled as a loaded machine or a busy event loop stalls it (SIGSTOP, then
SIGCONT), and what a client that sent its request in time, during the stall, gets back: a
server's deadlines are the client's, whatever its timers find when it runs again."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from tests.support.waiting import wait_until

T = TypeVar("T")
PHASES = ("handshake", "headers", "keep-alive")
EARLIER = b"GET /healthz HTTP/1.1\r\nHost: coordinator\r\n\r\n"  # phase keep-alive's first


def states(pid: int) -> set[str]:
    """The states of process pid's threads (S sleeping, R running, T stopped...)."""
    return {(task / "stat").read_text().rpartition(")")[2].split()[0]
            for task in Path(f"/proc/{pid}/task").iterdir()}


@contextlib.contextmanager
def stalled(pid: int, seconds: float) -> Iterator[None]:
    """Process pid stopped (SIGSTOP) for seconds from entry, once it is idle: back from a stop
    there, its wait for events ends with none (EINTR, the timeout past) and its timers run
    before it reads (stopped while it runs, it would look for events first). Entry waits until
    it is stopped (bytes sent before would wake it), leaving until it runs again."""
    gone = (FileNotFoundError, ProcessLookupError)  # a thread that ended as it was looked at
    wait_until(lambda: states(pid) == {"S"}, message=f"process {pid} idle", interval=0.001,
               ignoring=gone)
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: states(pid) == {"T"}, message=f"process {pid} stopped", interval=0.001,
               ignoring=gone)
    resume = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        yield
    finally:
        resume.join()


def answer_through_a_stall(ca_file: Path, port: int, pid: int, seconds: float,
                           request: bytes, phase: str) -> bytes:
    """The first bytes of the answer to request, sent over TLS to port at once as process pid
    stalls for seconds; b"" if the server closed the connection instead. phase "handshake":
    the stall begins before the server read the client's last handshake flight (TLS 1.3: the
    client is done, the server is not); "headers": once it completed the handshake (it sent
    its session tickets); "keep-alive": once it answered an earlier request (EARLIER) on the
    connection."""
    assert phase in PHASES, phase
    context = ssl.create_default_context(cafile=str(ca_file))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:

        def until_done(action: Callable[[], T]) -> T:
            while True:
                try:
                    return action()
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    if not (data := raw.recv(65536)):
                        incoming.write_eof()
                    incoming.write(data)

        until_done(tls.do_handshake)
        if phase == "headers":
            raw.sendall(outgoing.read())
            incoming.write(raw.recv(65536))  # the session tickets
        elif phase == "keep-alive":
            tls.write(EARLIER)
            answer = b""  # read whole: its headers, then the Content-Length of body
            while b"\r\n\r\n" not in answer:
                answer += until_done(lambda: tls.read(65536))
            head, _, body = answer.partition(b"\r\n\r\n")
            length = int(head.lower().partition(b"content-length:")[2].split(b"\r\n")[0])
            while len(body) < length:
                body += until_done(lambda: tls.read(65536))
            assert head.startswith(b"HTTP/1.1 200 OK"), head
        with stalled(pid, seconds):
            tls.write(request)
            raw.sendall(outgoing.read())
        try:
            return until_done(lambda: tls.read(64))
        except (ssl.SSLError, ConnectionError):
            return b""
