"""The download action against a real HTTP server on 127.0.0.1, file URLs and an artifact
source: sha256 verified while streaming, nothing kept on mismatch, no refetch when current."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.wire.protocol import ProxySettings, StateItem
from tests.support.blob import BLOB, BLOB_SHA, BlobServer, blob_server
from tests.support.items import apply, artifact_source, leftovers, make_item

pytestmark = pytest.mark.integration

WRONG_SHA = "0" * 64
TARGET = "/opt/bin/tool"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlobServer]:
    """No proxy from the environment: only the ones a test gives."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with blob_server() as served:
        yield served


def download(sha256: str = BLOB_SHA, mode: str = "0755", **source: str) -> StateItem:
    return make_item("d", {"type": "download", "path": TARGET, "sha256": sha256, "mode": mode,
                           **source})


async def test_a_url_is_downloaded_verified_and_given_its_mode(root: Path, server: BlobServer) -> None:
    outcome = await apply(download(url=f"{server.url}/blob"), root)
    assert outcome.succeeded, outcome.error
    target = root / TARGET.lstrip("/")
    assert target.read_bytes() == BLOB
    assert target.stat().st_mode & 0o7777 == 0o755
    assert outcome.output == f"downloaded {len(BLOB)} bytes from {server.url}/blob to {TARGET}"
    assert leftovers(target.parent) == []


@pytest.mark.parametrize("proxy", [
    ProxySettings(http="SERVER"),  # the node's config or the cluster's settings, merged
    ProxySettings(no_proxy=["other.example"]).over(ProxySettings(http="SERVER")),
])
async def test_a_url_download_goes_through_the_configured_proxy(
    root: Path, server: BlobServer, proxy: ProxySettings
) -> None:
    """The name below resolves nowhere: only the proxy (our server) can answer for it."""
    proxy = proxy.model_copy(update={"http": server.url})
    outcome = await apply(download(url="http://artifacts.example.invalid/blob"), root,
                          proxy=proxy)
    assert outcome.succeeded, outcome.error
    assert server.targets == ["artifacts.example.invalid"]
    assert (root / TARGET.lstrip("/")).read_bytes() == BLOB


async def test_no_proxy_in_the_settings_bypasses_the_proxy(root: Path, server: BlobServer) -> None:
    proxy = ProxySettings(http="http://127.0.0.1:9", no_proxy=["127.0.0.1"])  # 9: discard
    outcome = await apply(download(url=f"{server.url}/blob"), root, proxy=proxy)
    assert outcome.succeeded, outcome.error
    assert server.targets == ["127.0.0.1"]


async def test_a_sha256_mismatch_keeps_nothing_and_says_both_hashes(
    root: Path, server: BlobServer
) -> None:
    outcome = await apply(download(WRONG_SHA, url=f"{server.url}/blob"), root)
    assert not outcome.succeeded
    assert outcome.error == (f"sha256 mismatch for {server.url}/blob: expected {WRONG_SHA}, "
                             f"got {BLOB_SHA} ({len(BLOB)} bytes); nothing was written")
    directory = root / "opt/bin"
    assert list(directory.iterdir()) == []


async def test_a_mismatch_leaves_the_previous_file_in_place(root: Path, server: BlobServer) -> None:
    target = root / TARGET.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"previous version")
    outcome = await apply(download(WRONG_SHA, url=f"{server.url}/blob"), root)
    assert not outcome.succeeded
    assert target.read_bytes() == b"previous version"
    assert leftovers(target.parent) == []


async def test_a_current_target_is_not_fetched_again_but_gets_its_mode(
    root: Path, server: BlobServer
) -> None:
    target = root / TARGET.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_bytes(BLOB)
    target.chmod(0o600)
    outcome = await apply(download(url=f"{server.url}/blob"), root)
    assert outcome.succeeded
    assert outcome.output == f"{TARGET} already has sha256 {BLOB_SHA}"
    assert server.requests == []
    assert target.stat().st_mode & 0o7777 == 0o755


async def test_an_http_error_fails_the_item(root: Path, server: BlobServer) -> None:
    outcome = await apply(download(url=f"{server.url}/missing"), root)
    assert not outcome.succeeded
    assert outcome.error == f"GET {server.url}/missing answered HTTP 404 Not Found"
    assert not (root / TARGET.lstrip("/")).exists()


async def test_a_refused_connection_fails_the_item(root: Path, server: BlobServer) -> None:
    url = server.url.rsplit(":", 1)[0] + ":1/blob"
    outcome = await apply(download(url=url), root)
    assert not outcome.succeeded
    assert outcome.error.startswith(f"GET {url} failed: ConnectionRefusedError")


async def test_a_file_url_is_read_from_the_machine(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "mirror dir" / "tool"
    source.parent.mkdir()
    source.write_bytes(BLOB)
    outcome = await apply(download(url=source.as_uri()), root)
    assert outcome.succeeded, outcome.error
    assert (root / TARGET.lstrip("/")).read_bytes() == BLOB
    missing = await apply(download(WRONG_SHA, url=(tmp_path / "gone").as_uri()), root)
    assert missing.error == f"cannot read {(tmp_path / 'gone').as_uri()}: No such file or directory"


async def test_an_unsupported_scheme_is_refused(root: Path) -> None:
    outcome = await apply(download(url="ftp://127.0.0.1/tool"), root)
    assert outcome.error == "unsupported URL scheme 'ftp' in ftp://127.0.0.1/tool (http, https, file)"


async def test_an_artifact_comes_from_the_daemons_source(root: Path) -> None:
    asked: list[str] = []
    chunks = [BLOB[:1000], BLOB[1000:]]
    outcome = await apply(download(artifact="kubelet-1.30"), root,
                          artifacts=artifact_source(chunks, asked))
    assert outcome.succeeded, outcome.error
    assert asked == ["kubelet-1.30"]
    assert (root / TARGET.lstrip("/")).read_bytes() == BLOB


async def test_an_artifact_stream_that_breaks_keeps_nothing(root: Path) -> None:
    asked: list[Any] = []
    outcome = await apply(download(artifact="kubelet-1.30"), root,
                          artifacts=artifact_source([BLOB[:1000], BLOB[1000:]], asked,
                                                    fail_after=1))
    assert not outcome.succeeded
    assert outcome.error == "coordinator went away"
    assert list((root / "opt/bin").iterdir()) == []
