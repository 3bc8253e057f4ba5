"""The agent's HTTP client (calls in threads) against real servers on 127.0.0.1: answers of
every status come back, failures are named, the given proxy is used and the environment's
is not, a parked long-poll does not hold up a caller that gives up, and calls reuse their
kept-alive connections (one at a time each), also over TLS through a CONNECT proxy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nodeagent import http_client, trust
from nodeagent.client import CoordinatorClient, Held, Rejected, Unreachable
from nodeagent.wire.endpoint import Endpoint
from tests.support.harness import running_coordinator
from tests.support.ports import free_port
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.integration


class Recorder:
    """A server that records the request line's target and host of everything it gets, and
    the client port each came from (one per connection)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.ports: list[int] = []
        self.url = ""
        self.release = asyncio.Event()  # ends parked requests

    @property
    def connections(self) -> int:
        return len(set(self.ports))


def parked(server: Recorder) -> bool:
    """Whether a request to /park reached server (where it waits for server.release)."""
    return any(path == "/park" for _, path, _ in server.seen)


async def _serve(handler: web.Handler, port: int | None = None,
                 **runner_options: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    port = port or free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def recording(recorder: Recorder) -> web.Handler:
    """The handler of a Recorder's server: /missing is 404, /park waits for release, /close
    answers with Connection: close, /big is a large body; anything else echoes its body."""

    async def handle(request: web.Request) -> web.StreamResponse:
        recorder.seen.append((request.method, request.raw_path, request.host))
        recorder.ports.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        if "missing" in request.path:
            return web.json_response({"error": "no such machine"}, status=404)
        if request.path == "/park":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(recorder.release.wait(), 30)
        if request.path == "/big":
            return web.Response(body=b"x" * (3 * http_client.CHUNK + 5))
        response = web.json_response({"echo": (await request.read()).decode()})
        if request.path == "/close":
            response.force_close()
        return response

    return handle


@pytest.fixture
async def server() -> AsyncIterator[Recorder]:
    recorder = Recorder()
    runner, recorder.url = await _serve(recording(recorder))
    yield recorder
    recorder.release.set()
    await runner.cleanup()


async def test_answers_of_any_status_come_back_with_their_body(server: Recorder) -> None:
    ok = await http_client.request("POST", server.url + "/x", body=b"hello")
    assert (ok.status, ok.body) == (200, b'{"echo": "hello"}')
    missing = await http_client.request("GET", server.url + "/missing")
    assert missing.status == 404
    assert b"no such machine" in missing.body


async def test_a_refused_connection_is_a_transport_error_naming_it() -> None:
    with pytest.raises(http_client.TransportError, match="ConnectionRefusedError"):
        await http_client.request("GET", f"http://127.0.0.1:{free_port()}/")


async def test_a_read_timeout_is_a_transport_error(server: Recorder) -> None:
    with pytest.raises(http_client.TransportError, match="timed out"):
        await http_client.request("GET", server.url + "/park", timeout=0.3)


async def test_a_stream_arrives_whole_and_a_bad_status_is_named(server: Recorder) -> None:
    body = await http_client.open_body(server.url + "/big")
    chunks = [chunk async for chunk in body.chunks]
    assert (body.status, body.start) == (200, 0)
    assert sum(map(len, chunks)) == 3 * http_client.CHUNK + 5
    with pytest.raises(http_client.BadStatus) as raised:
        await http_client.open_body(server.url + "/missing")
    assert raised.value.status == 404


async def test_the_given_proxy_carries_the_request(server: Recorder) -> None:
    target = f"http://127.0.0.1:{free_port()}/v1/agent/register"  # nothing listens there
    reply = await http_client.request("POST", target, body=b"{}", proxy=server.url)
    assert reply.status == 200
    method, path, _ = server.seen[-1]
    assert (method, path) == ("POST", target)  # absolute-form: the proxy was asked to forward


async def test_the_environment_proxy_is_ignored(server: Recorder,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = Recorder()

    async def record(request: web.Request) -> web.Response:
        proxy.seen.append((request.method, request.raw_path, request.host))
        return web.Response(status=502)

    runner, proxy_url = await _serve(record)
    try:
        for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        reply = await http_client.request("GET", server.url + "/direct")
        assert reply.status == 200
        assert proxy.seen == []
    finally:
        await runner.cleanup()


async def test_a_parked_request_does_not_hold_up_shutdown(server: Recorder) -> None:
    """The agent stops on SIGTERM while its long-poll is parked: the event loop must close
    without waiting for the poll's 30 s (an executor thread would be joined at shutdown)."""

    async def abandon() -> None:
        poll = asyncio.create_task(http_client.request("GET", server.url + "/park", timeout=60))
        await wait_until_async(lambda: parked(server), message="the poll parked")
        poll.cancel()

    def run_loop() -> float:
        started = time.monotonic()
        asyncio.run(abandon())
        return time.monotonic() - started

    assert await asyncio.to_thread(run_loop) < 5  # the server parks the poll for 30 s
    assert parked(server)


async def test_the_agent_client_moves_to_the_next_replica_when_one_does_not_answer(
        server: Recorder) -> None:
    """A dead replica, then one answering 503, then a live one: each failed call says where
    the next goes, and calls stay with the replica that answers."""
    async def unavailable(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "store down"}, status=503)

    runner, sick = await _serve(unavailable)
    dead = f"http://127.0.0.1:{free_port()}"
    client = CoordinatorClient([Endpoint(dead), Endpoint(sick), Endpoint(server.url)], timeout=2)
    try:
        with pytest.raises(Unreachable, match=f"ConnectionRefused.*; trying {sick} next"):
            await client.heartbeat("m1", "secret")
        with pytest.raises(Unreachable, match=f"HTTP 503.*; trying {server.url} next"):
            await client.heartbeat("m1", "secret")
        await client.heartbeat("m1", "secret")
        await client.heartbeat("m1", "secret")
        assert [s[1] for s in server.seen] == ["/v1/agent/machines/m1/heartbeat"] * 2
        with pytest.raises(Rejected):  # a refusal is an answer: it stays
            await client.heartbeat("missing", "secret")
        assert client.url == server.url
    finally:
        await runner.cleanup()


async def test_a_call_to_be_verified_by_a_ca_is_never_sent_to_a_plain_http_url(
        server: Recorder) -> None:
    """A coordinator's replicas reached with its pinned CA: one of them plain HTTP would get
    the credential in clear text. The call fails there as a replica that does not answer,
    having sent nothing, and the next replica is tried."""
    pinned = trust.unverified_context()  # any context: a CA the call is to be verified by
    with pytest.raises(http_client.TransportError, match="plain HTTP"):
        await http_client.request("GET", server.url + "/x", context=pinned)
    client = CoordinatorClient([Endpoint(server.url)] * 2, timeout=2, context=pinned)
    with pytest.raises(Unreachable, match="plain HTTP"):
        await client.heartbeat("m1", "secret")
    assert server.seen == []


async def test_consecutive_calls_reuse_one_connection_and_concurrent_ones_have_their_own(
        server: Recorder) -> None:
    """Heartbeats over one kept-alive connection; a heartbeat while the long-poll is parked
    takes a second one rather than waiting for the first."""
    for _ in range(3):
        assert (await http_client.request("POST", server.url + "/heartbeat")).status == 200
    assert server.connections == 1
    poll = asyncio.create_task(http_client.request("GET", server.url + "/park"))
    await wait_until_async(lambda: parked(server), message="the poll parked")
    for _ in range(2):
        assert (await http_client.request("POST", server.url + "/heartbeat")).status == 200
    server.release.set()
    assert (await poll).status == 200
    assert server.connections == 2
    poll_port, *heartbeat_ports = server.ports[3:]
    assert poll_port not in heartbeat_ports  # the parked poll kept its connection to itself


async def test_polls_to_a_coordinator_that_does_not_count_them_leave_heartbeats_due(
        server: Recorder) -> None:
    """A coordinator from before nodeagent/wire/heartbeat.py answers polls without saying
    they count as heartbeats: the agent's client does not count them, so the daemon keeps
    heartbeating beside them (only a heartbeat answered counts)."""
    client = CoordinatorClient([Endpoint(server.url)])
    assert await client.assignment("m1", "credential", Held(), 0) is not None
    assert not client.polls_beat and not client.beat_within(60)
    await client.heartbeat("m1", "credential")
    assert client.beat_within(60)


async def test_an_answer_saying_close_is_not_reused(server: Recorder) -> None:
    for _ in range(2):
        assert (await http_client.request("GET", server.url + "/close")).status == 200
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_gives_way_to_a_new_one(
        server: Recorder) -> None:
    """A coordinator restarted, or one that closed an idle connection after its keep-alive
    timeout: the next call still gets its answer."""
    brief = Recorder()
    runner, brief.url = await _serve(recording(brief), keepalive_timeout=0.2)
    port = int(brief.url.rsplit(":", 1)[1])
    try:
        await http_client.request("GET", brief.url + "/a")
        await asyncio.sleep(0.5)  # past the server's keep-alive timeout
        assert (await http_client.request("GET", brief.url + "/b")).status == 200
        assert brief.connections == 2
        await runner.cleanup()  # the restart closes the idle connection
        runner, _ = await _serve(recording(brief), port)
        assert (await http_client.request("GET", brief.url + "/c")).status == 200
        assert brief.connections == 3
    finally:
        await runner.cleanup()


async def _raw_server(answers_per_connection: int) -> tuple[asyncio.Server, str, list[int]]:
    """A server answering `ok` to the first answers_per_connection requests on a connection,
    then closing it on the next one without a word: a keep-alive connection that the server
    closes just as a request goes out on it. Records each connection's requests."""
    requests: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(0)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                requests[-1] += 1
                if requests[-1] > answers_per_connection:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()

    port = free_port()
    return await asyncio.start_server(serve, "127.0.0.1", port), f"http://127.0.0.1:{port}", \
        requests


async def test_a_reused_connection_closed_without_an_answer_is_retried_once_afresh() -> None:
    server, url, requests = await _raw_server(answers_per_connection=1)
    async with server:
        for _ in range(3):
            reply = await http_client.request("GET", url + "/heartbeat")
            assert (reply.status, reply.body) == (200, b"ok")
        # Each reuse was closed unanswered and retried on a new connection, which answered.
        assert requests == [2, 2, 1]


async def test_a_new_connection_closed_without_an_answer_is_a_transport_error() -> None:
    server, url, requests = await _raw_server(answers_per_connection=0)
    async with server:
        with pytest.raises(http_client.TransportError, match="RemoteDisconnected"):
            await http_client.request("GET", url + "/heartbeat")
        assert requests == [1]  # not retried


class ConnectProxy:
    """An HTTPS proxy: CONNECT host:port opens a tunnel to it. Records each CONNECT line and
    its Proxy-Authorization."""

    def __init__(self) -> None:
        self.tunnels: list[tuple[str, str]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        _, target, _ = head[0].split(" ")
        auth = next((line.split(": ", 1)[1] for line in head
                     if line.lower().startswith("proxy-authorization:")), "")
        self.tunnels.append((target, auth))
        host, port = target.rsplit(":", 1)
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(1 << 16):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def test_https_through_a_connect_proxy_keeps_its_tunnel(tmp_path: Path) -> None:
    """The coordinator over TLS, through an HTTPS proxy that asks for credentials: one tunnel
    (one CONNECT, one TLS handshake) carries consecutive calls."""
    proxy = ConnectProxy()
    port = free_port()
    async with await asyncio.start_server(proxy.serve, "127.0.0.1", port):
        with running_coordinator(tmp_path, cluster=None) as coordinator:
            context = trust.context_for(coordinator.ca_file)
            for _ in range(3):
                reply = await http_client.request(
                    "GET", coordinator.url + "/healthz", proxy=f"http://node:s%40cret@127.0.0.1:{port}",
                    context=context)
                assert reply.status == 200
    target = coordinator.url.removeprefix("https://")
    assert proxy.tunnels == [(target, "Basic bm9kZTpzQGNyZXQ=")]  # node:s@cret
