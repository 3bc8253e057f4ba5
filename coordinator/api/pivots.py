"""The pivot's endpoints (domain/transfer/pivot.py, service/pivots.py). On the old coordinator: its
pivot (begin, record a step, roll back) and its frozen snapshot; on the target: the import."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, BinaryIO

from aiohttp import web

from coordinator.api.backups import ARCHIVE_TYPE
from coordinator.api.bodies import PivotBody
from coordinator.api.context import DATA_DIR, PRESENTATION, body, service
from coordinator.domain.errors import Conflict
from coordinator.domain.transfer import pivot as pv
from coordinator.domain.transfer.archive import SCHEMA_VERSION
from coordinator.service.pivots import check_receivable, receive_pivot
from nodeagent.wire.validation import InvalidDocument, Problem

# A pivot's archive is read past the API's usual body limit, into a file: what it unpacks to
# is bounded apart (domain/transfer/archive.py's MAX_UNPACKED).
MAX_ARCHIVE_BYTES = 1 << 30


def pivot_view(request: web.Request, pivot: pv.Pivot | None) -> dict[str, Any]:
    """The pivot, and how agents reach this coordinator (an abort brings moved ones back)."""
    presentation = request.app[PRESENTATION]
    return {"pivot": None if pivot is None else pivot.to_json(),
            "url": presentation.advertise_url, "ca_pem": presentation.ca_pem,
            "schema_version": SCHEMA_VERSION}


async def get_pivot(request: web.Request) -> web.Response:
    return web.json_response(pivot_view(request, service(request).pivots.pivot))


async def begin_pivot(request: web.Request) -> web.Response:
    wanted = await body(request, PivotBody)
    pivot = service(request).pivots.begin(wanted.to, wanted.ca_pem, wanted.token)
    return web.json_response(pivot_view(request, pivot))


async def record_step(request: web.Request) -> web.Response:
    step = request.match_info["step"]
    if step not in {s.value for s in pv.Step}:
        raise InvalidDocument([Problem("step", f"unknown step {step!r}: one of "
                                       f"{', '.join(s.value for s in pv.Step)}")])
    pivot = service(request).pivots.record(request.match_info["id"], pv.Step(step))
    return web.json_response(pivot_view(request, pivot))


async def abort_pivot(request: web.Request) -> web.Response:
    pivot = service(request).pivots.rollback(request.match_info["id"])
    return web.json_response(pivot_view(request, pivot))


async def pivot_snapshot(request: web.Request) -> web.Response:
    """The frozen coordinator's snapshot, for the target's import."""
    c = service(request)
    pivot = c.pivots.pivot
    if pivot is None or pivot.id != request.match_info["id"] or pivot.step is pv.Step.STARTED:
        raise Conflict(f"no frozen pivot {request.match_info['id']} here: run `coordinator "
                       "pivot --to URL` again")
    data = await c.queries.archive(request.app[DATA_DIR], request.app[PRESENTATION].advertise_url)
    return web.Response(body=data, content_type=ARCHIVE_TYPE)


async def check_import(request: web.Request) -> web.Response:
    """The target's side, before the old coordinator is frozen: whether it takes this pivot's
    state (query: pivot, when one is begun; schema, the old one's), 409 saying why not."""
    schema = request.query.get("schema", "")
    if not schema.isdigit():
        raise InvalidDocument([Problem("schema", "required: the old coordinator's schema "
                                       "version (a whole number)")])
    pivot_id = request.query.get("pivot") or None
    held = await check_receivable(service(request).writes, pivot_id, int(schema))
    return web.json_response({"pivot": pivot_id, "imported": held,
                              "schema_version": SCHEMA_VERSION})


async def import_pivot(request: web.Request) -> web.Response:
    """The target's side: the archive of a pivot (query: pivot, from) imported whole, once."""
    pivot_id, source = request.query.get("pivot", ""), request.query.get("from", "")
    if not pivot_id or not source:
        raise InvalidDocument([Problem("pivot" if not pivot_id else "from",
                                       "required: the pivot's id and the old coordinator's URL")])
    c = service(request)
    with tempfile.TemporaryFile(dir=request.app[DATA_DIR]) as spooled:
        await _spool(request, spooled)
        imported = await receive_pivot(c.writes, spooled, pivot_id, source, c.clock())
    return web.json_response({"pivot": pivot_id, "imported": imported})


async def _spool(request: web.Request, spooled: BinaryIO) -> None:
    """The body into spooled (a private temporary file in the data dir: the archive holds the
    CA's key and the secrets key), rewound: read from there a chunk at a time, however large
    it is, it never sits whole in memory."""
    size = 0
    async for chunk in request.content.iter_chunked(1 << 20):
        size += len(chunk)
        if size > MAX_ARCHIVE_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_ARCHIVE_BYTES, actual_size=size)
        await asyncio.to_thread(spooled.write, chunk)
    spooled.seek(0)
