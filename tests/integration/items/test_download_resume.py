"""A download cut short continues from the bytes on the node (Range, If-Range), and a node
never fetches the same bytes twice (its cache by sha256): against a real HTTP server on
127.0.0.1 that cuts connections, ignores ranges or changes its file, counting what it sent."""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

import pytest

from nodeagent.items.cache import NodeCache
from nodeagent.wire.protocol import StateItem
from tests.support.items import apply, leftovers, make_item, node_cache
from tests.support.ranged import Asked, RangedServer, ranged_server

pytestmark = pytest.mark.integration

CONTENT = bytes(range(256)) * 8192  # 2 MiB
SHA = hashlib.sha256(CONTENT).hexdigest()
HALF = len(CONTENT) // 2
TARGET = "/opt/bin/tool"


def download(url: str, path: str = TARGET, sha256: str = SHA) -> StateItem:
    return make_item("d", {"type": "download", "url": url, "path": path, "sha256": sha256,
                           "mode": "0755"})


async def cut_then_again(root: Path, server: RangedServer) -> tuple[str, str]:
    """The first attempt cut at HALF, then the second: their outcomes (error, output)."""
    server.cut_after = HALF
    first = await apply(download(server.url), root)
    assert not first.succeeded
    assert not (root / TARGET.lstrip("/")).exists(), "a cut download reached the target"
    second = await apply(download(server.url), root)
    assert second.succeeded, second.error
    assert (root / TARGET.lstrip("/")).read_bytes() == CONTENT
    assert leftovers(root / "opt/bin") == []
    return first.error, second.output


async def test_a_cut_download_resumes_from_the_bytes_on_the_node(root: Path) -> None:
    with ranged_server(CONTENT) as server:
        error, output = await cut_then_again(root, server)
    assert f"after {HALF} bytes (kept for the next attempt)" in error
    assert server.asked[1] == Asked(f"bytes={HALF}-", '"v1"', 206)
    assert server.sent == len(CONTENT)  # half, then the other half: nothing twice
    assert output == (f"downloaded {len(CONTENT) - HALF} bytes from {server.url} to {TARGET} "
                      f"(resumed after the {HALF} bytes already on the node)")


async def test_a_server_without_ranges_sends_the_whole_again_and_the_file_is_right(
        root: Path) -> None:
    with ranged_server(CONTENT, ranges=False, etag=None) as server:
        _, output = await cut_then_again(root, server)
    assert [a.status for a in server.asked] == [200, 200]
    assert server.asked[1].range == f"bytes={HALF}-" and server.asked[1].if_range is None
    assert output == f"downloaded {len(CONTENT)} bytes from {server.url} to {TARGET}"


@pytest.mark.parametrize("if_range", [True, False], ids=["if-range", "if-range-ignored"])
async def test_bytes_of_another_version_are_not_spliced(root: Path, if_range: bool) -> None:
    """The first attempt got half of another version of the file (ETag "old"); the server
    then has the one the item wants: a server that checks If-Range sends it whole, and the
    206 of one that does not is seen to be of another ETag and asked for whole."""
    other = bytes(reversed(CONTENT))
    with ranged_server(other, etag='"old"', if_range=if_range) as server:
        server.cut_after = HALF
        assert not (await apply(download(server.url), root)).succeeded
        server.content, server.etag = CONTENT, '"new"'
        outcome = await apply(download(server.url), root)
    assert outcome.succeeded, outcome.error
    assert (root / TARGET.lstrip("/")).read_bytes() == CONTENT
    assert server.asked[1].if_range == '"old"'
    assert [a.status for a in server.asked[1:]] == ([200] if if_range else [206, 200])


async def test_bytes_held_past_the_files_end_are_dropped_and_the_file_fetched_whole(
        root: Path) -> None:
    cache = node_cache(root)
    cache.prepare()
    cache.partial(SHA).write_bytes(CONTENT + b"garbage")
    with ranged_server(CONTENT) as server:
        outcome = await apply(download(server.url), root)
    assert outcome.succeeded, outcome.error
    assert [a.status for a in server.asked] == [416, 200]
    assert (root / TARGET.lstrip("/")).read_bytes() == CONTENT


async def test_a_spliced_file_fails_the_item_writes_nothing_and_starts_over_next_time(
        root: Path) -> None:
    """No validator at all (no ETag, no If-Range): the splice is caught by the whole file's
    sha256, the bytes held are dropped, and the next attempt fetches the whole."""
    with ranged_server(bytes(reversed(CONTENT)), etag=None) as server:
        server.cut_after = HALF
        assert not (await apply(download(server.url), root)).succeeded
        server.content = CONTENT
        spliced = await apply(download(server.url), root)
        assert not spliced.succeeded
        assert spliced.error.startswith(f"sha256 mismatch for {server.url}: expected {SHA}")
        assert not (root / "opt/bin/tool").exists()
        again = await apply(download(server.url), root)
    assert again.succeeded, again.error
    assert server.asked[-1].range is None
    assert (root / TARGET.lstrip("/")).read_bytes() == CONTENT


async def test_the_same_bytes_are_never_fetched_twice(root: Path) -> None:
    """A re-run item (its target gone) and another item wanting the same sha256 copy the
    node's cache: the server sends the file once."""
    with ranged_server(CONTENT) as server:
        assert (await apply(download(server.url), root)).succeeded
        (root / TARGET.lstrip("/")).unlink()
        rerun = await apply(download(server.url), root)
        other = await apply(download(server.url, path="/usr/local/bin/same"), root)
    assert rerun.succeeded and other.succeeded, (rerun.error, other.error)
    assert server.sent == len(CONTENT) and len(server.asked) == 1
    assert rerun.output == (f"copied {len(CONTENT)} bytes to {TARGET} from the node's cache "
                            f"(sha256 {SHA})")
    assert (root / "usr/local/bin/same").read_bytes() == CONTENT
    assert (root / "usr/local/bin/same").stat().st_mode & 0o7777 == 0o755
    entry = node_cache(root).entry(SHA)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert entry.stat().st_ino != (root / "usr/local/bin/same").stat().st_ino  # a copy


async def test_a_corrupt_cache_entry_is_never_used_and_is_fetched_again(root: Path) -> None:
    with ranged_server(CONTENT) as server:
        assert (await apply(download(server.url), root)).succeeded
        entry = node_cache(root).entry(SHA)
        entry.write_bytes(b"X" + CONTENT[1:])  # a flipped byte
        outcome = await apply(download(server.url, path="/opt/bin/other"), root)
    assert outcome.succeeded, outcome.error
    assert outcome.output.startswith("downloaded")
    assert server.sent == 2 * len(CONTENT)
    assert (root / "opt/bin/other").read_bytes() == CONTENT
    assert entry.read_bytes() == CONTENT  # the good bytes replace it


async def test_the_cache_keeps_at_most_its_limit_least_recently_used_first(root: Path) -> None:
    small = NodeCache(node_cache(root).entries.parent, 2 * len(CONTENT))
    contents = [bytes([n]) * len(CONTENT) for n in range(3)]
    with ranged_server(contents[0]) as server:
        for n, content in enumerate(contents):
            server.content = content
            item = download(server.url, f"/opt/f{n}", hashlib.sha256(content).hexdigest())
            outcome = await apply(item, root, cache=small)
            assert outcome.succeeded, outcome.error
    kept = sorted(p.name for p in small.entries.iterdir())
    assert kept == sorted(hashlib.sha256(c).hexdigest() for c in contents[1:])


async def test_one_download_of_a_file_at_a_time_on_a_node(root: Path) -> None:
    """A phase's child a killed daemon left running still writes the partial file: another
    fails (and is retried) rather than interleave its bytes."""
    cache = node_cache(root)
    cache.prepare()
    with ranged_server(CONTENT) as server, cache.partial(SHA).open("ab") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        busy = await apply(download(server.url), root)
        fcntl.flock(other.fileno(), fcntl.LOCK_UN)
        done = await apply(download(server.url), root)
    assert busy.error == (f"another process is downloading {SHA} on this node (an earlier "
                          "phase still stopping)")
    assert done.succeeded, done.error
