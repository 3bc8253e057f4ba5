"""The aiohttp application: the route table's routes behind the one middleware."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from coordinator.api.context import (
    ARTIFACTS,
    CLOSING,
    DATA_DIR,
    MAX_BODY_BYTES,
    PRESENTATION,
    REGISTER_LIMIT,
    REGISTER_TOTAL_LIMIT,
    SERVICE,
    Presentation,
)
from coordinator.api.headers import security_headers
from coordinator.api.middleware import ROUTE_INDEX, middleware
from coordinator.api.routes import ROUTES
from coordinator.api.routing import ROUTE_TABLE
from coordinator.edge.ratelimit import RateLimiter
from coordinator.service.coordinator import Coordinator


def create_app(coordinator: Coordinator, artifacts: Path, presentation: Presentation,
               data_dir: Path) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=MAX_BODY_BYTES)
    app[CLOSING] = asyncio.Event()
    app[SERVICE] = coordinator
    app[PRESENTATION] = presentation
    app[ARTIFACTS] = artifacts
    app[DATA_DIR] = data_dir
    app[ROUTE_TABLE] = ROUTES
    app[ROUTE_INDEX] = {(r.method, r.path): r for r in ROUTES}
    if presentation.register_rate > 0:
        app[REGISTER_LIMIT] = RateLimiter(presentation.register_rate, presentation.register_burst)
    if presentation.register_total_rate > 0:
        app[REGISTER_TOTAL_LIMIT] = RateLimiter(presentation.register_total_rate,
                                                presentation.register_total_burst)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, route.handler)
    app.on_response_prepare.append(security_headers)
    app.on_shutdown.append(_close_streams)
    return app


async def _close_streams(app: web.Application) -> None:
    """Open event streams end at shutdown instead of holding it up."""
    app[CLOSING].set()
