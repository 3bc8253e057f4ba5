"""The agent's urllib-in-threads HTTP client against real servers on 127.0.0.1: answers of
every status come back, failures are named, the given proxy is used and the environment's
is not, and a parked long-poll does not hold up a caller that gives up."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from nodeagent import http_client
from nodeagent.client import CoordinatorClient, Endpoint, Rejected, Unreachable
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


class Recorder:
    """A server that records the request line's target and host of everything it gets."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.url = ""
        self.release = asyncio.Event()  # ends parked requests


async def _serve(handler: web.Handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def server() -> AsyncIterator[Recorder]:
    recorder = Recorder()

    async def handle(request: web.Request) -> web.StreamResponse:
        recorder.seen.append((request.method, request.raw_path, request.host))
        if "missing" in request.path:
            return web.json_response({"error": "no such machine"}, status=404)
        if request.path == "/park":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(recorder.release.wait(), 30)
        if request.path == "/big":
            return web.Response(body=b"x" * (3 * http_client.CHUNK + 5))
        return web.json_response({"echo": (await request.read()).decode()})

    runner, recorder.url = await _serve(handle)
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
    chunks = [chunk async for chunk in http_client.stream(server.url + "/big")]
    assert sum(map(len, chunks)) == 3 * http_client.CHUNK + 5
    with pytest.raises(http_client.BadStatus) as raised:
        async for _ in http_client.stream(server.url + "/missing"):
            pass
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
        await asyncio.sleep(0.2)
        poll.cancel()

    def run_loop() -> float:
        started = time.monotonic()
        asyncio.run(abandon())
        return time.monotonic() - started

    assert await asyncio.to_thread(run_loop) < 5  # the server parks the poll for 30 s
    assert any(path == "/park" for _, path, _ in server.seen)


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
