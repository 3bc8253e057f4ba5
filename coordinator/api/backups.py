"""POST /v1/backup: the running coordinator's whole state as one archive (service/snapshot.py).
A POST, not a GET: it hands out the CA's key and the secrets key, so read-only tokens may not
take one, and every backup taken is audited."""

from __future__ import annotations

import asyncio

from aiohttp import web

from coordinator.api.context import DATA_DIR, service
from coordinator.service import snapshot

ARCHIVE_TYPE = "application/gzip"


async def backup(request: web.Request) -> web.Response:
    taken = await snapshot.take(service(request).store, request.app[DATA_DIR])
    data = await asyncio.to_thread(snapshot.to_bytes, taken)  # encoding never stalls agents
    return web.Response(body=data, content_type=ARCHIVE_TYPE, headers={
        "Content-Disposition": 'attachment; filename="coordinator-backup.tgz"'})
