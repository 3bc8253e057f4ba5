"""What anyone may ask without a credential: health, the API's description, the CA
certificate, metrics, and the dashboard's files (the page itself asks for a token)."""

from __future__ import annotations

import hmac
from pathlib import Path

from aiohttp import web

from coordinator.api.context import PRESENTATION, bearer, refused, service
from coordinator.api.openapi import openapi_document
from coordinator.api.routing import ROUTE_TABLE
from coordinator.domain.errors import NotFound, Unauthorized
from coordinator.metrics import CONTENT_TYPE, METRICS

DASHBOARD = Path(__file__).with_name("dashboard")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await service(request).queries.check_store()
    except Exception as exc:
        return web.json_response({"status": "store unavailable", "error": str(exc)}, status=503)
    return web.json_response({"status": "ready"})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(request.app[ROUTE_TABLE]))


async def ca_certificate(request: web.Request) -> web.Response:
    """Agents fetch it once and check it against the hash in their join string."""
    pem = request.app[PRESENTATION].ca_pem
    if pem is None:
        raise NotFound("this coordinator serves plain HTTP and has no CA")
    return web.Response(text=pem, content_type="application/x-pem-file")


async def metrics(request: web.Request) -> web.Response:
    """Open, unless serve was given a metrics token: then only its bearer may scrape."""
    expected = request.app[PRESENTATION].metrics_token
    if expected is not None:
        try:
            if not hmac.compare_digest(bearer(request).encode(), expected.encode()):
                raise Unauthorized("wrong metrics token")
        except Unauthorized as exc:
            refused(request, exc)
            raise
    counts = await service(request).queries.count_machines()
    return web.Response(body=METRICS.exposition(counts), headers={"Content-Type": CONTENT_TYPE})


async def dashboard_root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/index.html")


async def dashboard(request: web.Request) -> web.StreamResponse:
    """The dashboard's static files (HTML, JS, CSS shipped in the package; no build step)."""
    name = request.match_info["name"]
    files = {p.name: p for p in DASHBOARD.iterdir() if p.is_file()}
    if name not in files:
        raise NotFound(f"no dashboard file {name}")
    return web.FileResponse(files[name], headers={"Cache-Control": "no-cache"})
