"""Artifacts from a served coordinator over TLS, as agents download them: whole through the
agent's own client, by ranges (an agent resumes a cut download with `Range: bytes=N-`), only
for registered machines, never from outside the store, and many at once while heartbeats
keep being answered. Each test runs twice: the API's port serving the bytes itself, and with
`--artifact-port`, where the API answers 307 with a signed link to that port."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import os
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from nodeagent.client import CoordinatorClient
from nodeagent.wire.endpoint import Endpoint
from tests.support.driver import Registered
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

SIZE = 5 * 2**20 + 12345  # many of the server's 256 KiB chunks, and a ragged end
PAYLOAD = os.urandom(SIZE)


@pytest.fixture(scope="module", params=["api-port", "artifact-port"])
def served(tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[ServedCoordinator]:
    args = ["--artifact-port", str(free_port())] if request.param == "artifact-port" else []
    with running_coordinator(tmp_path_factory.mktemp("artifacts"), serve_args=args) \
            as coordinator:
        store = coordinator.data / "artifacts"
        (store / "bundle.bin").write_bytes(PAYLOAD)
        (store / "a name + é.bin").write_bytes(PAYLOAD[:1000])
        (coordinator.data / "secret").write_text("not an artifact")
        yield coordinator


@pytest.fixture(scope="module")
def agent(served: ServedCoordinator) -> Registered:
    return served.register("downloader")


def get(served: ServedCoordinator, path: str, credential: str | None,
        **headers: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one GET over TLS with the coordinator's CA, after a 307 to
    the artifact port if the API answers one (with the same headers, as urllib and curl -L
    follow it)."""
    if credential is not None:
        headers["Authorization"] = f"Bearer {credential}"
    status, answer, body = fetch(served.ca_file, served.port, path, headers)
    if status == 307:
        link = urlsplit(answer["Location"])
        assert (link.scheme, link.hostname) == ("https", "127.0.0.1")
        assert link.path == path and link.port != served.port
        return fetch(served.ca_file, link.port or 443, f"{link.path}?{link.query}", headers)
    return status, answer, body


def fetch(ca_file: Path, port: int, target: str,
          headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One GET to 127.0.0.1:port over TLS, trusting ca_file."""
    context = ssl.create_default_context(cafile=str(ca_file))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_agents_own_client_downloads_an_artifact_whole(served: ServedCoordinator,
                                                            agent: Registered) -> None:
    client = CoordinatorClient([Endpoint(served.url)], timeout=10,
                               context=ssl.create_default_context(cafile=str(served.ca_file)))

    async def download() -> bytes:
        body = await client.artifact(agent["credential"], "bundle.bin", {})
        assert (body.status, body.start) == (200, 0)
        return b"".join([chunk async for chunk in body.chunks])

    assert hashlib.sha256(asyncio.run(download())).digest() == hashlib.sha256(PAYLOAD).digest()


def test_a_name_with_spaces_and_non_ascii_is_served_by_the_agents_client(
        served: ServedCoordinator, agent: Registered) -> None:
    client = CoordinatorClient([Endpoint(served.url)], timeout=10,
                               context=ssl.create_default_context(cafile=str(served.ca_file)))

    async def download() -> bytes:
        body = await client.artifact(agent["credential"], "a name + é.bin", {})
        return b"".join([chunk async for chunk in body.chunks])

    assert asyncio.run(download()) == PAYLOAD[:1000]


@pytest.mark.parametrize(("asked", "start", "end"), [
    ("bytes=1048570-", 1048570, SIZE),  # a resumed download, across a chunk's edge
    ("bytes=0-99", 0, 100),
    ("bytes=-10", SIZE - 10, SIZE),
    (f"bytes={SIZE - 1}-", SIZE - 1, SIZE),
])
def test_a_range_is_answered_with_206_and_exactly_its_bytes(
        served: ServedCoordinator, agent: Registered, asked: str, start: int, end: int) -> None:
    status, headers, body = get(served, "/v1/artifacts/bundle.bin", agent["credential"],
                                Range=asked)
    assert status == 206
    assert headers["Content-Range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert int(headers["Content-Length"]) == end - start and body == PAYLOAD[start:end]


def test_a_range_past_the_end_is_416(served: ServedCoordinator, agent: Registered) -> None:
    status, headers, _ = get(served, "/v1/artifacts/bundle.bin", agent["credential"],
                             Range=f"bytes={SIZE}-")
    assert status == 416 and headers["Content-Range"] == f"bytes */{SIZE}"


def test_only_a_registered_machine_downloads_and_a_revoked_one_no_longer(
        served: ServedCoordinator) -> None:
    assert get(served, "/v1/artifacts/bundle.bin", None)[0] == 401
    assert get(served, "/v1/artifacts/bundle.bin", "not-a-credential")[0] == 401
    revoked = served.register("revoked")
    assert get(served, "/v1/artifacts/bundle.bin", revoked["credential"], Range="bytes=0-0")[0] \
        == 206
    served.admin.request("POST", "/v1/machines/revoked/revoke")
    assert get(served, "/v1/artifacts/bundle.bin", revoked["credential"])[0] == 401


@pytest.mark.parametrize("name", ["..%2Fsecret", "%2E%2E/secret", "..%2F..%2Fetc%2Fpasswd",
                                  "%2Fetc%2Fpasswd"])
def test_no_name_reaches_outside_the_store(served: ServedCoordinator, agent: Registered,
                                           name: str) -> None:
    status, _, body = get(served, f"/v1/artifacts/{name}", agent["credential"])
    assert status == 404 and b"not an artifact" not in body and b"root:" not in body


def test_many_downloads_at_once_arrive_whole_while_heartbeats_are_answered(
        served: ServedCoordinator, agent: Registered) -> None:
    beating = served.register("beating")
    with ThreadPoolExecutor(12) as pool:
        downloads = [pool.submit(get, served, "/v1/artifacts/bundle.bin", agent["credential"])
                     for _ in range(10)]
        beats = 0
        while not all(d.done() for d in downloads):
            served.heartbeat(beating)
            beats += 1
        bodies = [d.result() for d in downloads]
    assert beats >= 1
    assert all(status == 200 and body == PAYLOAD for status, _, body in bodies)
