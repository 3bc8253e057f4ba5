"""A client that opens connections and never finishes a request cannot deny the coordinator to
others: one address holds at most its share, a connection must send its first request's
headers in time and a request its body, and descriptors are kept in reserve; each refusal is
in the coordinator's log. The coordinator runs under a low
descriptor limit (400) so that a few hundred connections would exhaust it; the hostile client
plays other hosts from 127.0.0.x source addresses on loopback."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli.client import AdminClient
from coordinator.server.listener import ConnectionLimits
from tests.integration.api.test_coordinator_log import lines
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.stalls import answer_through_a_stall
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

LIMIT = 400  # descriptors the coordinator may open (soft and hard)
SHARE = 100  # connections one address may hold
HEADER_SECONDS = 2.0
BODY_SECONDS = 1.0
IDLE_SECONDS = 1.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedCoordinator]:
    with running_coordinator(
            tmp_path, cluster=None, prefix=("prlimit", f"--nofile={LIMIT}:{LIMIT}"),
            serve_args=("--connections-per-address", str(SHARE),
                        "--header-timeout", str(HEADER_SECONDS),
                        "--body-timeout", str(BODY_SECONDS))) as coordinator:
        yield coordinator


@pytest.fixture
def idle(tmp_path: Path) -> Iterator[ServedCoordinator]:
    """A coordinator that closes kept-alive connections idle for IDLE_SECONDS."""
    with running_coordinator(tmp_path, cluster=None,
                             serve_args=("--idle-timeout", str(IDLE_SECONDS))) as coordinator:
        yield coordinator


@contextlib.contextmanager
def held(port: int, count: int, source: str) -> Iterator[list[socket.socket]]:
    """count TCP connections from source that never send a byte, closed on leaving."""
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5,
                                                    source_address=(source, 0)))
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def still_open(sockets: list[socket.socket]) -> int:
    """How many of sockets the server has not closed (nor sent a byte on), all looked at
    at once: one at a time, hundreds took longer than the header deadline, which then closed
    more of them."""
    poller = select.poll()
    for sock in sockets:
        poller.register(sock, select.POLLIN)
    return len(sockets) - len(poller.poll(0))


def admin_latencies(served: ServedCoordinator, count: int) -> list[float]:
    """Seconds each of count admin requests took, each on a new connection from 127.0.0.1."""
    admin = AdminClient(served.url, served.token_file.read_text().strip(), timeout=3,
                        ca_file=str(served.ca_file))
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        admin.all_machines()
        latencies.append(time.monotonic() - started)
    return latencies


def test_one_address_holds_its_share_and_others_are_still_served(
        served: ServedCoordinator) -> None:
    with held(served.port, 3 * SHARE, "127.0.0.2") as hostile:
        wait_until(lambda: still_open(hostile) <= SHARE, message="the connections past the "
                   "share closed")
        assert still_open(hostile) == SHARE
        assert max(admin_latencies(served, 20)) < 1.0
    # The operator can tell: the first refusal logged at once, all of them counted in an
    # audit event (written each minute, and when the coordinator stops).
    assert (f"connection refused (0): {SHARE} connections already open from 127.0.0.2"
            in served.log.read_text())
    served.stop()
    served.start()
    audit = served.cli("events", "--kind", "audit").stdout
    assert f"127.0.0.2: connection refused {2 * SHARE} times ({SHARE} connections already " \
        "open from 127.0.0.2)" in audit


def test_a_connection_that_dawdles_over_its_headers_is_closed(served: ServedCoordinator) -> None:
    context = ssl.create_default_context(cafile=str(served.ca_file))
    raw = socket.create_connection(("127.0.0.1", served.port), timeout=5,
                                   source_address=("127.0.0.3", 0))
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: coordinator\r\n")
        started = time.monotonic()
        with pytest.raises(OSError):  # a header line every 0.25 s, until the server closes
            while time.monotonic() - started < 4 * HEADER_SECONDS:
                slow.sendall(b"X-Dawdle: 1\r\n")
                time.sleep(0.25)
                slow.settimeout(0.01)
                with contextlib.suppress(TimeoutError):
                    if slow.recv(1) == b"":
                        raise ConnectionResetError("closed by the coordinator")
        assert time.monotonic() - started < 2 * HEADER_SECONDS
    # Logged as refusals are (at info, the first of an address each minute), as is a
    # connection that never began its TLS handshake.
    with held(served.port, 3, "127.0.0.5") as silent:
        wait_until(lambda: still_open(silent) == 0, 2 * HEADER_SECONDS,
                   "the idle connections closed")
    for source in ("127.0.0.3", "127.0.0.5"):
        (refused,) = lines(served, event="refused", what="connection", source=source)
        assert refused["level"] == "info"
        assert refused["msg"] == "connection refused (0): no TLS handshake and request " \
            f"headers within {HEADER_SECONDS:g} s"


def test_a_request_sent_in_time_is_answered_though_the_coordinator_stalled_past_the_deadline(
        served: ServedCoordinator) -> None:
    """The deadline is the client's, not the coordinator's: after a stall of its own the event
    loop runs its timers before it reads, and closed the connection of a request that had come
    in time, without a word (a Prometheus scrape on a loaded machine saw "Remote end closed
    connection without response")."""
    for phase in ("handshake", "headers"):
        assert answered_through_a_stall(served, HEADER_SECONDS + 1, phase), phase


def test_a_kept_alive_connections_next_request_sent_in_time_is_answered_after_a_stall(
        idle: ServedCoordinator) -> None:
    """The same for a kept-alive connection's next request, sent as the coordinator stalls
    past the keep-alive deadline: aiohttp's timer closed it unanswered."""
    assert answered_through_a_stall(idle, IDLE_SECONDS + 1, "keep-alive")


def answered_through_a_stall(served: ServedCoordinator, seconds: float, phase: str) -> bool:
    """Whether a GET /metrics sent at once, as the coordinator stalls for seconds, is
    answered."""
    return answer_through_a_stall(
        served.ca_file, served.port, served.pid, seconds,
        b"GET /metrics HTTP/1.1\r\nHost: coordinator\r\nConnection: close\r\n\r\n",
        phase).startswith(b"HTTP/1.1 200 OK")


def test_descriptors_are_kept_for_the_process_when_connections_fill_them(
        served: ServedCoordinator) -> None:
    """Many addresses together fill every connection the limit allows: new ones are closed at
    once (not left to fail the process's own files), and once they leave all is served."""
    with contextlib.ExitStack() as stack:
        hostile = [s for index in range(2, 6)
                   for s in stack.enter_context(held(served.port, SHARE, f"127.0.2.{index}"))]
        # refused before the process runs short: the reserve stays free
        wait_until(lambda: still_open(hostile) <= LIMIT - ConnectionLimits().reserve,
                   message="the connections past the limit closed")
        assert still_open(hostile) == LIMIT - ConnectionLimits().reserve
        log = served.log.read_text()
        assert "Too many open files" not in log
    assert max(admin_latencies(served, 5)) < 1.0


def test_a_body_sent_slowly_is_answered_408_at_its_deadline_while_others_are_served(
        served: ServedCoordinator) -> None:
    """A stranger's registration as agents before the join token's header send it (its body
    is read), a byte at a time after complete headers: it was read for as long as it came."""
    context = ssl.create_default_context(cafile=str(served.ca_file))
    raw = socket.create_connection(("127.0.0.1", served.port), timeout=5,
                                   source_address=("127.0.0.4", 0))
    latencies, answer = [], b""
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as slow:
        slow.sendall(b"POST /v1/agent/register HTTP/1.1\r\nHost: coordinator\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        started = time.monotonic()
        slow.settimeout(0.2)
        with contextlib.suppress(OSError):  # the close, once answered
            while time.monotonic() - started < 5 * BODY_SECONDS and not answer:
                latencies += admin_latencies(served, 1)
                with contextlib.suppress(TimeoutError):
                    answer = slow.recv(4096)
                slow.sendall(b" ")
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"request body not complete within 1 s" in answer
    assert BODY_SECONDS <= elapsed < 2 * BODY_SECONDS + 0.5
    assert max(latencies) < 1.0
    (refused,) = lines(served, event="refused", what="request", source="127.0.0.4")
    assert (refused["status"], refused["path"]) == ("408", "/v1/agent/register")
    assert "Traceback" not in served.log.read_text()
