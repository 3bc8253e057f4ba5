"""`serve --artifact-port`: what the port itself answers to links that are not the API's,
tampered or expired (403), a replaced artifact's resumption (the new file whole), and that a
coordinator killed outright leaves nothing holding the port. The downloads themselves, on
both ports, are in test_artifact_serving.py."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import pytest

from coordinator.edge.artifact_links import ArtifactLinks
from coordinator.server import secrets_key
from nodeagent.client import CoordinatorClient
from nodeagent.wire.endpoint import Endpoint
from tests.integration.api.test_coordinator_log import lines
from tests.integration.test_artifact_serving import fetch
from tests.integration.test_connection_limits import held, still_open
from tests.support.driver import Registered
from tests.support.harness import COORDINATOR, ServedCoordinator, running_coordinator
from tests.support.ports import free_port
from tests.support.stalls import answer_through_a_stall
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PAYLOAD = os.urandom(3 * 2**20 + 7)


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, port: int) -> Iterator[ServedCoordinator]:
    with running_coordinator(tmp_path_factory.mktemp("artifact-port"),
                             serve_args=["--artifact-port", str(port)]) as coordinator:
        (coordinator.data / "artifacts" / "bundle.bin").write_bytes(PAYLOAD)
        (coordinator.data / "secret").write_text("not an artifact")
        yield coordinator


@pytest.fixture(scope="module")
def agent(served: ServedCoordinator) -> Registered:
    return served.register("downloader")


def link(served: ServedCoordinator, agent: Registered, name: str = "bundle.bin") -> str:
    """The path and query of the API's 307 for name."""
    status, headers, _ = fetch(served.ca_file, served.port, f"/v1/artifacts/{quote(name)}",
                               {"Authorization": f"Bearer {agent['credential']}"})
    assert status == 307
    location = urlsplit(headers["Location"])
    return f"{location.path}?{location.query}"


def own_link(served: ServedCoordinator, port: int, name: str, expires: float) -> str:
    """A link signed with the coordinator's own key, for what the API would never sign."""
    links = ArtifactLinks(secrets_key.load(served.data / "secrets.key")
                          .derive(b"artifact links"), port)
    query = urlencode({"expires": str(int(expires)),
                       "signature": links.sign(name, int(expires))})
    return f"/v1/artifacts/{quote(name, safe='')}?{query}"


def test_the_apis_link_serves_the_artifact_without_a_credential(
        served: ServedCoordinator, agent: Registered, port: int) -> None:
    status, headers, body = fetch(served.ca_file, port, link(served, agent), {})
    assert status == 200 and body == PAYLOAD
    assert headers["Accept-Ranges"] == "bytes" and headers["ETag"].startswith('"')


def test_the_agents_client_resumes_through_the_redirect(served: ServedCoordinator,
                                                         agent: Registered) -> None:
    """As nodeagent/items/download.py resumes: Range from the bytes held, If-Range the
    validator of the first answer; urllib follows the 307 with both."""
    client = CoordinatorClient([Endpoint(served.url)], timeout=10,
                               context=ssl.create_default_context(cafile=str(served.ca_file)))

    async def resume() -> bytes:
        first = await client.artifact(agent["credential"], "bundle.bin", {})
        await first.chunks.aclose()
        assert first.validator is not None
        rest = await client.artifact(agent["credential"], "bundle.bin",
                                     {"Range": "bytes=1000-", "If-Range": first.validator})
        assert (rest.status, rest.start) == (206, 1000)
        return b"".join([chunk async for chunk in rest.chunks])

    assert asyncio.run(resume()) == PAYLOAD[1000:]


def test_a_tampered_or_missing_signature_and_another_name_are_refused(
        served: ServedCoordinator, agent: Registered, port: int) -> None:
    (served.data / "artifacts" / "other.bin").write_bytes(b"other")
    good = link(served, agent)
    path, _, query = good.partition("?")
    tampered = good[:-1] + ("0" if good[-1] != "0" else "1")
    for target in (tampered, path, f"/v1/artifacts/other.bin?{query}"):
        status, _, body = fetch(served.ca_file, port, target, {})
        assert status == 403
        assert "not valid or has expired" in json.loads(body)["error"]


def test_an_expired_link_is_refused(served: ServedCoordinator, port: int) -> None:
    status, _, body = fetch(served.ca_file, port,
                            own_link(served, port, "bundle.bin", time.time() - 1), {})
    assert status == 403 and "expired" in json.loads(body)["error"]


@pytest.mark.parametrize("name", ["../secret", "/etc/passwd", "../../etc/passwd"])
def test_even_a_signed_link_reaches_nothing_outside_the_store(
        served: ServedCoordinator, port: int, name: str) -> None:
    status, _, body = fetch(served.ca_file, port,
                            own_link(served, port, name, time.time() + 60), {})
    assert status == 404 and b"not an artifact" not in body and b"root:" not in body


def test_a_resumed_download_of_a_replaced_artifact_gets_the_new_one_whole(
        served: ServedCoordinator, agent: Registered, port: int) -> None:
    """An agent resuming with If-Range: the version it holds the start of; the artifact was
    replaced meanwhile, so splicing the new file's tail onto the old head would be wrong."""
    store = served.data / "artifacts"
    (store / "moving.bin").write_bytes(b"old" * 1000)
    _, first, _ = fetch(served.ca_file, port, link(served, agent, "moving.bin"), {})
    status, _, body = fetch(served.ca_file, port, link(served, agent, "moving.bin"),
                            {"Range": "bytes=100-", "If-Range": first["ETag"]})
    assert (status, body) == (206, (b"old" * 1000)[100:])
    (store / "moving.bin.new").write_bytes(b"new" * 1000)
    (store / "moving.bin.new").rename(store / "moving.bin")
    status, _, body = fetch(served.ca_file, port, link(served, agent, "moving.bin"),
                            {"Range": "bytes=100-", "If-Range": first["ETag"]})
    assert (status, body) == (200, b"new" * 1000)


def test_only_get_and_head_are_served(served: ServedCoordinator, agent: Registered,
                                      port: int) -> None:
    context = ssl.create_default_context(cafile=str(served.ca_file))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("DELETE", link(served, agent))
        response = connection.getresponse()
        assert response.status == 405 and "GET" in json.loads(response.read())["error"]
    finally:
        connection.close()


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_killed_coordinator_leaves_nothing_on_the_port_and_comes_back(
        tmp_path: Path) -> None:
    port = free_port()
    with running_coordinator(tmp_path, serve_args=["--artifact-port", str(port)]) as served:
        (served.data / "artifacts" / "bundle.bin").write_bytes(PAYLOAD)
        agent = served.register("downloader")
        assert not refused(port)
        served.stop(crash=True)
        wait_until(lambda: refused(port), message="the artifact port gone with its coordinator")
        served.start()
        assert fetch(served.ca_file, port, link(served, agent), {})[2] == PAYLOAD


def artifact_process(served: ServedCoordinator) -> int:
    """The pid of the process serving served's artifact port."""
    children = [pid for task in Path(f"/proc/{served.pid}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    serving = [pid for pid in children
               if b"serve-artifacts" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(serving) == 1
    return int(serving[0])


def test_a_killed_artifact_process_is_started_again(served: ServedCoordinator,
                                                     agent: Registered, port: int) -> None:
    os.kill(artifact_process(served), signal.SIGKILL)
    # connections made meanwhile wait in the listen queue for the new one
    body = wait_until(lambda: fetch(served.ca_file, port, link(served, agent), {})[2], 15,
                      "the artifact port back", interval=0.2, ignoring=(OSError,))
    assert body == PAYLOAD
    assert "the artifact port's process exited" in served.log.read_text()


def test_a_connection_that_never_asks_is_dropped_after_the_header_timeout(
        tmp_path: Path) -> None:
    """A client that only connects holds nothing for long, and its address is in the log."""
    port = free_port()
    with running_coordinator(tmp_path, serve_args=["--artifact-port", str(port),
                                                   "--header-timeout", "1"]) as served, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
        started = time.monotonic()
        assert idle.recv(1) == b""  # closed by the server
        assert time.monotonic() - started < 5
    (refused,) = lines(served, event="refused", what="connection", source="127.0.0.1")
    assert refused["msg"] == \
        "connection refused (0): no TLS handshake and request headers within 1 s"


def test_a_request_sent_in_time_is_answered_though_the_port_stalled_past_the_deadline(
        tmp_path: Path) -> None:
    """As on the API's port (test_connection_limits.py): back from a stall of its process
    (SIGSTOP here, a loaded machine in life) the port closed the connection of a request that
    had come in time, unanswered."""
    port = free_port()
    with running_coordinator(tmp_path, serve_args=["--artifact-port", str(port),
                                                   "--header-timeout", "1"]) as served:
        (served.data / "artifacts" / "bundle.bin").write_bytes(PAYLOAD)
        request = f"GET {link(served, served.register('downloader'))} HTTP/1.1\r\n" \
            "Host: coordinator\r\n\r\n"
        for phase in ("handshake", "headers"):
            answer = answer_through_a_stall(served.ca_file, port, artifact_process(served), 2,
                                            request.encode(), phase)
            assert answer.startswith(b"HTTP/1.1 200 OK"), phase


def test_a_replica_with_the_same_secrets_key_honours_anothers_links(
        served: ServedCoordinator, agent: Registered, tmp_path: Path) -> None:
    """Replicas behind one load balancer: the 307 of one, followed to the other's port."""
    other = tmp_path / "coordinator-data"
    other.mkdir(mode=0o700)
    shutil.copytree(served.data / "pki", other / "pki")
    shutil.copy2(served.data / "secrets.key", other / "secrets.key")
    other_port = free_port()
    with running_coordinator(tmp_path, cluster=None,
                             serve_args=["--artifact-port", str(other_port)]) as replica:
        (replica.data / "artifacts" / "bundle.bin").write_bytes(PAYLOAD)
        status, _, body = fetch(served.ca_file, other_port, link(served, agent), {})
    assert status == 200 and body == PAYLOAD


def test_plain_http_and_an_artifact_port_are_refused_together(tmp_path: Path) -> None:
    result = subprocess.run([COORDINATOR, "serve", "--data-dir", str(tmp_path / "data"),
                             "--listen", f"127.0.0.1:{free_port()}", "--insecure-http",
                             "--artifact-port", str(free_port())],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--artifact-port serves artifacts over TLS: not with --insecure-http" in result.stderr


def test_a_port_in_use_fails_serve_naming_the_option(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken, \
            running_coordinator(tmp_path) as served:
        served.stop()
        busy = taken.getsockname()[1]
        result = subprocess.run([COORDINATOR, "serve", "--data-dir", str(served.data),
                                 "--listen", f"127.0.0.1:{served.port}",
                                 "--artifact-port", str(busy)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"--artifact-port: cannot listen on 127.0.0.1:{busy}" in result.stderr


FLOOD_SHARE = 50  # connections one address may hold on either port, in the test below


def test_idle_connections_and_slow_handshakes_from_one_address_delay_no_download(
        tmp_path: Path) -> None:
    """A client with no credential holds as many connections as it may from 127.0.0.2, half
    never sending a byte, half stopping inside their TLS handshake: it keeps only its share,
    and a download from another address is served at once (it waited behind them for the
    header timeout, once per 128 of them)."""
    port = free_port()
    with running_coordinator(tmp_path, serve_args=[
            "--artifact-port", str(port), "--header-timeout", "5",
            "--connections-per-address", str(FLOOD_SHARE)]) as served, \
            held(port, 3 * FLOOD_SHARE, "127.0.0.2") as idle, \
            held(port, 3 * FLOOD_SHARE, "127.0.0.2") as handshaking:
        for sock in handshaking:
            sock.sendall(b"\x16\x03\x01\x02")  # a TLS record's header, cut short
        (served.data / "artifacts" / "bundle.bin").write_bytes(PAYLOAD)
        target = link(served, served.register("downloader"))
        started = time.monotonic()
        assert fetch(served.ca_file, port, target, {})[2] == PAYLOAD
        # behind them it would wait the 5 s header timeout; at once is well under, even on a
        # loaded CI machine (2.6 s seen there under a load of 8 on 2 cores)
        assert time.monotonic() - started < 4
        assert still_open(idle + handshaking) == FLOOD_SHARE
    log = served.log.read_text()
    assert f"{FLOOD_SHARE} connections already open from 127.0.0.2" in log
