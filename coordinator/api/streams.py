"""The event history: pages of it, and a server-sent stream of what happens from now on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

from aiohttp import web

from coordinator.api.context import CLOSING, service
from coordinator.api.views import event_view
from coordinator.domain.errors import NotFound
from nodeagent.wire.validation import InvalidDocument, Problem

STREAM_KEEPALIVE_SECONDS = 15.0
STREAM_PAGE = 500
MAX_EVENT_PAGE = 1000  # events in one answer of /v1/events: page on with after_id
MAX_PAGE_BYTES = 4 * 1024 * 1024  # nor more than this, whatever the limit (one event at least)


async def _event_filters(request: web.Request) -> dict[str, Any]:
    """cluster; machine (id or hostname); kind (comma-separated); since (unix time);
    after_id; limit (1 to MAX_EVENT_PAGE); order (asc, or desc for the newest first)."""
    query = request.query
    try:
        filters: dict[str, Any] = {
            "cluster": query.get("cluster"),
            "since_id": int(query.get("after_id", "0")),
            "since_time": float(query["since"]) if "since" in query else None,
            "limit": int(query.get("limit", str(MAX_EVENT_PAGE))),
        }
    except ValueError:
        raise InvalidDocument([Problem("query", "after_id and limit must be integers, "
                                                "since a unix time in seconds")]) from None
    if not 1 <= filters["limit"] <= MAX_EVENT_PAGE:  # SQLite reads LIMIT -1 as no limit
        raise InvalidDocument([Problem("limit", f"must be from 1 to {MAX_EVENT_PAGE}: page on "
                                                "with after_id")])
    if not 0 <= filters["since_id"] < 2**63:  # a database integer
        raise InvalidDocument([Problem("after_id", "must be an event id (0 or more)")])
    if filters["since_time"] is not None and not math.isfinite(filters["since_time"]):
        raise InvalidDocument([Problem("since", "must be a unix time in seconds")])
    if query.get("order", "asc") not in ("asc", "desc"):
        raise InvalidDocument([Problem("order", "must be asc or desc")])
    filters["newest_first"] = query.get("order") == "desc"
    if "kind" in query:
        filters["kinds"] = [k for k in query["kind"].split(",") if k]
    if "machine" in query:
        filters["machine"] = await _history_of(request, query["machine"], query.get("cluster"))
    return filters


async def _history_of(request: web.Request, ref: str, cluster: str | None) -> str:
    """The id whose history a machine filter names: the machine's, live; else that of the
    machine deleted last with this id or hostname (machines/removed lists them all)."""
    queries = service(request).queries
    try:
        return (await queries.machine(ref, cluster)).id
    except NotFound:
        removed = await queries.removed(ref, cluster)
        return removed[0].machine_id if removed else ref


async def events(request: web.Request) -> web.Response:
    """One page of history: at most `limit` events and MAX_PAGE_BYTES (a shorter page does
    not mean the end: the history ends with an empty page)."""
    found = await service(request).queries.events(**await _event_filters(request))
    page: list[str] = []
    size = 0
    for event in found:
        text = json.dumps(event_view(event))
        size += len(text) + 2
        if page and size > MAX_PAGE_BYTES:
            break
        page.append(text)
    return web.Response(text="[" + ", ".join(page) + "]", content_type="application/json")


async def event_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: each new event as it is recorded (the same filters as /v1/events).
    Starts after `after_id`, or the Last-Event-ID a reconnecting client sends, or else after
    the newest event now: a stream shows what happens from now on."""
    c = service(request)
    filters = await _event_filters(request)
    filters.update(limit=STREAM_PAGE, newest_first=False)
    resume = request.headers.get("Last-Event-ID", "")
    if resume.isdigit():
        filters["since_id"] = int(resume)
    elif "after_id" not in request.query:
        filters["since_id"] = await c.queries.newest_event_id()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    await response.write(b": stream open\n\n")
    closing = request.app[CLOSING]
    with contextlib.suppress(ConnectionError):
        while not closing.is_set():
            changed = c.notifier.changes()  # subscribe before reading
            page = await c.queries.events(**filters)
            for event in page:
                data = json.dumps(event_view(event), separators=(",", ":"))
                await response.write(f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"
                                     .encode())
                filters["since_id"] = event.id
            if len(page) == STREAM_PAGE:
                continue
            if not await _news_or_closing(changed, closing):
                await response.write(b": keepalive\n\n")
    return response


async def _news_or_closing(changed: asyncio.Event, closing: asyncio.Event) -> bool:
    """Wait for new events or the server's shutdown; False when the keep-alive time ran out."""
    woken = asyncio.ensure_future(changed.wait())
    stop = asyncio.ensure_future(closing.wait())
    done, _ = await asyncio.wait({woken, stop}, timeout=STREAM_KEEPALIVE_SECONDS,
                                 return_when=asyncio.FIRST_COMPLETED)
    woken.cancel()
    stop.cancel()
    return bool(done)
