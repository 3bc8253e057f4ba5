"""Artifact bodies, sent so that downloads share the event loop with the agents' requests.

Over TLS no sendfile is possible: every byte of an artifact is read from the file and encrypted
in the event loop's thread, the thread that also answers heartbeats. aiohttp's FileResponse then
reads 256 KiB at a time for each download and encrypts whatever every download has ready in one
turn of the loop: with 20 downloads at once, a heartbeat waited behind all of them (p99 250 ms,
docs/benchmarks.md). Here each chunk is read (os.pread, in a thread) and handed to the
transport, which encrypts it, under one gate shared by all downloads: at most GATE chunks are
encrypted in a turn, so a request that arrives meanwhile waits a few milliseconds, whatever the
number of downloads. Waiting for a slow client to take its bytes happens outside the gate: a
stalled download never holds up another. FileResponse still does the rest: Range (206, 416),
conditional requests, the headers."""

from __future__ import annotations

import asyncio
import os
from typing import IO, Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

CHUNK = 1 << 20  # bytes read and encrypted at once: about half a millisecond of AES-GCM
GATE = 2  # chunks being read or encrypted at once, across every download


def artifact_gate() -> asyncio.Semaphore:
    """The gate the downloads of one application share."""
    return asyncio.Semaphore(GATE)


class ArtifactResponse(web.FileResponse):
    """A file from the artifact store, its body sent through the shared gate."""

    def __init__(self, path: os.PathLike[str], gate: asyncio.Semaphore) -> None:
        super().__init__(path, chunk_size=CHUNK)
        self._gate = gate

    async def _sendfile(self, request: web.BaseRequest, fobj: IO[Any], offset: int,
                        count: int) -> AbstractStreamWriter:
        writer = await super(web.FileResponse, self).prepare(request)
        assert writer is not None
        loop = asyncio.get_running_loop()
        while count > 0:
            async with self._gate:
                chunk = await loop.run_in_executor(None, os.pread, fobj.fileno(),
                                                   min(CHUNK, count), offset)
                if not chunk:  # the file shrank under us: the client sees a short body
                    break
                await writer.write(chunk, drain=False)
            offset, count = offset + len(chunk), count - len(chunk)
            await writer.drain()
        return writer
