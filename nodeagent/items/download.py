"""The download action: an artifact from the coordinator's store or a URL, streamed to disk
while hashed, and kept only when its sha256 matches, so a truncated or tampered download
never replaces the target. A target that already has the right content is not fetched; nor
is content the node's cache holds (items/cache.py). A download cut short continues from the
bytes already on the node with a Range request (If-Range: the same version only)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from nodeagent import http_client
from nodeagent.http_client import Body
from nodeagent.items import directory_of, machine_path
from nodeagent.items.cache import Corrupt, NodeCache
from nodeagent.items.outcome import ItemFailed, ItemOutcome
from nodeagent.proxy import proxy_for
from nodeagent.wire.protocol import DownloadAction, ProxySettings

# The daemon's seam to the coordinator: artifact name and request headers (Range, If-Range)
# -> its body, opened. It raises when the coordinator can't deliver; the item fails with that
# error and is retried.
ArtifactSource = Callable[[str, Mapping[str, str]], Awaitable[Body]]
# A source with the headers of the request: the body opened.
Opener = Callable[[Mapping[str, str]], Awaitable[Body]]

_CHUNK = 1 << 16


def _already_there(directory: int, name: str, sha256: str, mode: int) -> bool:
    """Whether the entry name of directory already holds content of this sha256, then given
    mode; never through a link in its place (a link is replaced by the download instead)."""
    digest = hashlib.sha256()
    try:
        with open(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory),
                  "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
            if digest.hexdigest() != sha256:
                return False
            os.fchmod(handle.fileno(), mode)
    except OSError:  # missing, unreadable, a directory, or a link
        return False
    return True


async def _file_chunks(path: str, url: str) -> AsyncIterator[bytes]:
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                yield chunk
    except OSError as exc:
        raise ItemFailed(f"cannot read {url}: {exc.strerror or exc}") from None


async def open_url(url: str, proxy: ProxySettings, headers: Mapping[str, str]) -> Body:
    """Open a http(s) or file URL. HTTP goes through `proxy` (the node's config over the
    cluster's settings), else the one the environment names (HTTPS_PROXY, NO_PROXY, ...);
    a file URL names a path on the real machine (read whole: no range). A 416 (the range
    asked for lies past the end) is raised as BadStatus, for the caller to start over."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Body(200, 0, None, _file_chunks(url2pathname(parts.path), url))
    if parts.scheme not in ("http", "https"):
        raise ItemFailed(f"unsupported URL scheme {parts.scheme!r} in {url} (http, https, file)")
    try:
        return await http_client.open_body(url, headers=headers,
                                           proxy=proxy_for(url, proxy, os.environ))
    except http_client.BadStatus as exc:
        if exc.status == 416:
            raise
        raise ItemFailed(f"GET {url} answered {exc}") from None
    except http_client.TransportError as exc:
        raise ItemFailed(f"GET {url} failed: {exc}") from None


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[bytes]) -> AsyncIterator[None]:
    """Close a stream abandoned early (timeout, failed write) now, releasing its connection,
    instead of whenever the garbage collector finds it."""
    try:
        yield
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def apply_download(action: DownloadAction, root: Path, artifacts: ArtifactSource,
                         proxy: ProxySettings, cache: NodeCache) -> ItemOutcome:
    target = machine_path(root, action.path)
    mode = int(action.mode, 8)
    sha256 = action.sha256
    with directory_of(root, action.path, target, create=True) as directory:
        if await asyncio.to_thread(_already_there, directory, target.name, sha256, mode):
            return ItemOutcome(True, output=f"{action.path} already has sha256 {sha256}")
        await asyncio.to_thread(cache.prepare)
        with contextlib.suppress(Corrupt):  # removed: fetched again below
            size = await asyncio.to_thread(cache.copy_to, sha256, directory, target.name, mode)
            if size is not None:
                return ItemOutcome(True, output=f"copied {size} bytes to {action.path} from "
                                   f"the node's cache (sha256 {sha256})")
        source = action.artifact or action.url or ""
        if action.artifact:
            opener: Opener = partial(artifacts, action.artifact)
        else:
            opener = partial(open_url, source, proxy)
        size, held = await _fetch(sha256, source, opener, cache)
        try:
            await asyncio.to_thread(cache.copy_to, sha256, directory, target.name, mode)
        finally:
            await asyncio.to_thread(cache.evict)
    resumed = f" (resumed after the {held} bytes already on the node)" if held else ""
    return ItemOutcome(True, output=f"downloaded {size - held} bytes from {source} to "
                       f"{action.path}{resumed}")


def _held(path: Path) -> tuple[int, hashlib._Hash]:
    """How many bytes of a download the node holds at path, and their running sha256."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        pass
    return size, digest


async def _open_from(opener: Opener, held: int, validator: str | None) -> Body | None:
    """The body from byte held on (If-Range: the version of validator only); None when the
    bytes held reach past the end of the file, which a 416 says."""
    headers = {"Range": f"bytes={held}-"}
    if validator:
        headers["If-Range"] = validator
    try:
        return await opener(headers)
    except Exception as exc:  # the coordinator's Rejected and a URL's BadStatus both say it
        if getattr(exc, "status", None) == 416:
            return None
        raise


async def _resumed(opener: Opener, held: int, validator: str | None) -> Body | None:
    """The rest of a download from byte held, when the server sends exactly that of the
    same version; None when the download must start over."""
    body = await _open_from(opener, held, validator)
    if body is None or body.status == 200:  # no ranges here, or another version: whole
        return body
    if body.start == held and (validator is None or body.validator in (None, validator)):
        return body
    await body.chunks.aclose()  # type: ignore[attr-defined]  # not the part asked for
    return None


async def _fetch(sha256: str, source: str, opener: Opener, cache: NodeCache) -> tuple[int, int]:
    """Bring the bytes of sha256 into the node's cache from source, continuing from those a
    cut download left; their size and how many were already there."""
    path = cache.partial(sha256)
    held, digest = await asyncio.to_thread(_held, path)
    size = held
    if not held or digest.hexdigest() != sha256:  # else whole already: killed before keeping
        body = await _resumed(opener, held, cache.validator(sha256, source)) if held else None
        if body is None or body.status == 200:  # start over, cleanly
            held, digest = 0, hashlib.sha256()
            body = body or await opener({})
        await asyncio.to_thread(cache.remember, sha256, source, body.validator)
        size = await _append(body, path, held, digest)
    if digest.hexdigest() != sha256:
        await asyncio.to_thread(cache.forget_partial, sha256)
        raise ItemFailed(f"sha256 mismatch for {source}: expected {sha256}, "
                         f"got {digest.hexdigest()} ({size} bytes); nothing was written")
    await asyncio.to_thread(cache.keep, sha256)  # its syncs off the event loop
    return size, held


async def _append(body: Body, path: Path, held: int, digest: hashlib._Hash) -> int:
    """Write body after the first held bytes of path (0600, never through a link), hashing
    it on; the size of the whole, synced to disk off the event loop (heartbeats go on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    size = held
    async with _closing(body.chunks):
        with open(fd, "wb") as handle:
            try:  # one writer: a phase's child left behind by a killed daemon may still run
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ItemFailed(f"another process is downloading {path.name} on this node "
                                 "(an earlier phase still stopping)") from None
            handle.truncate(held)
            handle.seek(held)
            try:
                async for chunk in body.chunks:
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
            except http_client.TransportError as exc:
                raise ItemFailed(f"{exc} after {size} bytes (kept for the next attempt)") \
                    from None
            handle.flush()
            await asyncio.to_thread(os.fsync, handle.fileno())
    return size
