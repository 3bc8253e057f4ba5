"""The download action: an artifact from the coordinator's store or a URL, streamed to disk
while hashed, and kept only when its sha256 matches, so a truncated or tampered download
never replaces the target. A target that already has the right content is not fetched."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from nodeagent import http_client
from nodeagent.atomic import atomic_file_in
from nodeagent.items import directory_of, machine_path
from nodeagent.items.outcome import ItemFailed, ItemOutcome
from nodeagent.protocol import DownloadAction, ProxySettings
from nodeagent.proxy import proxy_for

# The daemon's seam to the coordinator: artifact name -> its bytes, streamed. It raises when
# the coordinator can't deliver; the item fails with that error and is retried.
ArtifactSource = Callable[[str], AsyncIterator[bytes]]

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


async def open_url(url: str, proxy: ProxySettings) -> AsyncIterator[bytes]:
    """Stream a http(s) or file URL. HTTP goes through `proxy` (the node's config over the
    cluster's settings), else the one the environment names (HTTPS_PROXY, NO_PROXY, ...);
    a file URL names a path on the real machine."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        try:
            with open(url2pathname(parts.path), "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    yield chunk
        except OSError as exc:
            raise ItemFailed(f"cannot read {url}: {exc.strerror or exc}") from None
        return
    if parts.scheme not in ("http", "https"):
        raise ItemFailed(f"unsupported URL scheme {parts.scheme!r} in {url} (http, https, file)")
    chunks = http_client.stream(url, proxy=proxy_for(url, proxy, os.environ))
    try:
        async for chunk in chunks:
            yield chunk
    except http_client.BadStatus as exc:
        raise ItemFailed(f"GET {url} answered {exc}") from None
    except http_client.TransportError as exc:
        raise ItemFailed(f"GET {url} failed: {exc}") from None
    finally:
        await chunks.aclose()


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
                         proxy: ProxySettings) -> ItemOutcome:
    target = machine_path(root, action.path)
    mode = int(action.mode, 8)
    with directory_of(root, action.path, target, create=True) as directory:
        if await asyncio.to_thread(_already_there, directory, target.name, action.sha256, mode):
            return ItemOutcome(True, output=f"{action.path} already has sha256 {action.sha256}")
        return await _fetch(action, directory, target.name, artifacts, proxy)


async def _fetch(action: DownloadAction, directory: int, name: str, artifacts: ArtifactSource,
                 proxy: ProxySettings) -> ItemOutcome:
    """The download written as the entry name of directory, kept only when its sha256 matches."""
    source = action.artifact or action.url or ""
    stream = artifacts(action.artifact) if action.artifact else open_url(source, proxy)
    digest = hashlib.sha256()
    size = 0
    async with _closing(stream):
        with atomic_file_in(directory, name, int(action.mode, 8)) as handle:
            async for chunk in stream:
                digest.update(chunk)
                size += len(chunk)
                handle.write(chunk)
            if digest.hexdigest() != action.sha256:
                raise ItemFailed(f"sha256 mismatch for {source}: expected {action.sha256}, "
                                 f"got {digest.hexdigest()} ({size} bytes); nothing was written")
            handle.flush()
            # Flush a large file to disk off the event loop; atomic_file_in's own fsync then has
            # nothing left to write and doesn't stall heartbeats.
            await asyncio.to_thread(os.fsync, handle.fileno())
    return ItemOutcome(True, output=f"downloaded {size} bytes from {source} to {action.path}")
