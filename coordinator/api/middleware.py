"""What every request goes through: its route's authentication, errors the service raised
mapped to answers, and its latency by endpoint. One middleware, not three: each layer costs
every request a coroutine and aiohttp's wrapper."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable

from aiohttp import web

from coordinator.api.bodydeadline import BodyDeadline, BodyTimedOut
from coordinator.api.context import (
    HAND_OUT_AUDIT,
    MAX_BODY_BYTES,
    PRESENTATION,
    bearer,
    error,
    refused,
    service,
)
from coordinator.api.routing import Handler, Route
from coordinator.domain.errors import (
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    TooManyRequests,
    Unauthorized,
)
from coordinator.domain.machines.refusals import REQUEST
from coordinator.metrics import record_request
from nodeagent.wire.logfmt import fields
from nodeagent.wire.validation import InvalidDocument

log = logging.getLogger("coordinator")
ROUTE_INDEX = web.AppKey("route_index", dict)
STATUSES = ((Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (Conflict, 409), (Gone, 410))
MAPPED = (InvalidDocument, TooManyRequests, web.HTTPRequestEntityTooLarge, BodyTimedOut,
          *(kind for kind, _ in STATUSES))


def mapped(exc: Exception) -> web.Response:
    """The answer to an error the service raised."""
    if isinstance(exc, InvalidDocument):
        return error(422, "invalid document: " + "; ".join(p.text() for p in exc.problems),
                     exc.problems)
    if isinstance(exc, TooManyRequests):
        response = error(429, str(exc))
        response.headers["Retry-After"] = str(math.ceil(exc.retry_after))
        return response
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return error(413, f"request body larger than {MAX_BODY_BYTES} bytes")
    if isinstance(exc, BodyTimedOut):  # the rest of the body is never read: the connection goes
        response = error(408, str(exc))
        response.force_close()
        return response
    status = next(code for kind, code in STATUSES if isinstance(exc, kind))
    return error(status, str(exc))


def _route(request: web.Request) -> Route | None:
    """The table's route this request matched (None: no route, answered 404 or 405)."""
    resource = request.match_info.route.resource
    if resource is None:
        return None
    return request.app[ROUTE_INDEX].get((request.method, resource.canonical))


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admin routes are authorized here; agents' routes authenticate in their handlers (they
    need to know which machine is asking); open routes and unknown paths need nothing. A body
    has a deadline (bodydeadline.py) while its handler runs."""
    started = time.perf_counter()
    code = 500
    deadline = BodyDeadline(request, request.app[PRESENTATION].body_seconds) \
        if request.body_exists else None
    try:
        try:
            route = _route(request)
            if route is not None and route.auth == "admin":
                response = await _admin(request, handler, route)
            else:
                response = await handler(request)
        except MAPPED as exc:
            response = mapped(exc)
            if isinstance(exc, BodyTimedOut):  # counted and logged as refusals are
                service(request).refusals.refused(request.remote or "unknown", 408, str(exc),
                                                  request.method, request.path, REQUEST)
            elif response.status in (413, 422):  # bad input: one line, never a traceback
                log.info("%s %s refused (%d): %.300s", request.method, request.path,
                         response.status, exc, extra=fields(event="bad-request",
                                                            status=response.status))
        code = response.status
        return response
    except web.HTTPException as exc:
        code = exc.status
        raise
    except Exception:  # a bug: its traceback in the log, once, and a 500 saying where to look
        log.exception("%s %s failed", request.method, request.path, extra=fields(
            event="error", method=request.method, path=request.path[:200]))
        return error(500, "internal error: the coordinator's log has its details")
    finally:
        if deadline is not None:
            deadline.cancel()
        resource = request.match_info.route.resource
        endpoint = resource.canonical if resource is not None else "unmatched"
        record_request(request.method, endpoint, code, time.perf_counter() - started)


async def _admin(request: web.Request, handler: Handler, route: Route) -> web.StreamResponse:
    """An admin token is needed (a read-only one may only read, or send a dry run), and every
    change is audited, as is every refusal (counted, then written once a minute)."""
    c = service(request)
    try:
        token = await c.access.authorize_admin(bearer(request), route.changes)
    except (Unauthorized, Forbidden) as exc:
        refused(request, exc)
        raise
    if route.changes and not route.hands_out and \
            (moved := c.pivots.refused_change(request.path)) is not None:
        raise Conflict(moved)  # frozen for a pivot, or moved: the message names the target
    def audit(status: int) -> Awaitable[None]:
        return c.admin.audit(f"{token.name} ({token.id})", request.method, request.path, status,
                             request.match_info.get("name", ""))

    if route.hands_out:
        request[HAND_OUT_AUDIT] = lambda: audit(200)
        return await handler(request)
    response = await handler(request)
    if route.changes and response.status < 400:
        await audit(response.status)
    return response
