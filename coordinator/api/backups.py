"""POST /v1/backup: the running coordinator's whole state as one archive (service/snapshot.py).
A POST, not a GET: it hands out the CA's key and the secrets key, so read-only tokens may not
take one, and every backup taken is audited."""

from __future__ import annotations

from aiohttp import web

from coordinator.api.context import DATA_DIR, PRESENTATION, service

ARCHIVE_TYPE = "application/gzip"


async def backup(request: web.Request) -> web.Response:
    data = await service(request).queries.archive(request.app[DATA_DIR],
                                                 request.app[PRESENTATION].advertise_url)
    return web.Response(body=data, content_type=ARCHIVE_TYPE, headers={
        "Content-Disposition": 'attachment; filename="coordinator-backup.tgz"'})
