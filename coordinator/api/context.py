"""What every handler shares: the application's keys, how the coordinator presents itself,
and reading a request's credential, body and query."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from coordinator.domain.errors import Conflict, Forbidden, Unauthorized
from coordinator.domain.machines.refusals import ADMIN_REQUEST
from coordinator.edge.artifact_links import ArtifactLinks
from coordinator.edge.connections import BODY_SECONDS
from coordinator.edge.ratelimit import RateLimiter
from coordinator.service.coordinator import Coordinator
from nodeagent.wire.validation import TOO_DEEP, InvalidDocument, Problem, problems_from, too_deep

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Presentation:
    """How this coordinator presents itself: the URL agents use (it goes into join strings),
    its CA certificate (None when serving plain HTTP), the registration rate limit, and the
    token /metrics asks for (None: metrics are open)."""

    advertise_url: str
    ca_pem: str | None = None
    register_rate: float = 5.0  # per second and client address; 0 turns the limit off
    register_burst: int = 50
    metrics_token: str | None = None
    # Registrations whose body is read, from all addresses together; 0 turns the limit off.
    register_total_rate: float = 50.0
    register_total_burst: int = 100
    # A request body's grace from the end of its headers (bodydeadline.py), then a second for
    # each 64 KiB it sent: past that, 408.
    body_seconds: float = BODY_SECONDS


SERVICE = web.AppKey("coordinator", Coordinator)
PRESENTATION = web.AppKey("presentation", Presentation)
REGISTER_LIMIT = web.AppKey("register_limit", RateLimiter)
REGISTER_TOTAL_LIMIT = web.AppKey("register_total_limit", RateLimiter)
ARTIFACTS = web.AppKey("artifacts", Path)
ARTIFACT_LINKS = web.AppKey("artifact_links", ArtifactLinks)  # only with an artifact port
DATA_DIR = web.AppKey("data_dir", Path)  # its PKI and secrets key go into backups
CLOSING = web.AppKey("closing", asyncio.Event)
# A hands-out route's audit (routing.Route.hands_out), which its handler awaits once it found
# what to hand out and before the first byte of it leaves: every handout is on record, even
# one whose connection breaks.
HAND_OUT_AUDIT = web.RequestKey("hand_out_audit", Callable[[], Awaitable[None]])


def service(request: web.Request) -> Coordinator:
    return request.app[SERVICE]


def error(status: int, message: str, problems: list[Problem] | None = None) -> web.Response:
    """An error answer: the message, and for a bad document every problem with its path."""
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = [{"path": p.path, "line": p.line, "message": p.message}
                            for p in problems]
    return web.json_response(body, status=status)


def refused(request: web.Request, exc: Unauthorized | Forbidden | Conflict,
            what: str = ADMIN_REQUEST) -> None:
    """Count a refused admin (or metrics) request, or registration, for the audit trail."""
    status = 401 if isinstance(exc, Unauthorized) else 403 if isinstance(exc, Forbidden) else 409
    service(request).refusals.refused(request.remote or "unknown", status, str(exc),
                                      request.method, request.path, what)


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    return token.strip()


async def text(request: web.Request) -> str:
    try:
        return (await request.read()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDocument([Problem("", f"body is not UTF-8 text (byte {exc.start})")]) \
            from None


async def body(request: web.Request, model: type[M], optional: bool = False) -> M:
    """The validated JSON body; with optional, an empty body means every field's default."""
    raw = await text(request)
    if optional and not raw.strip():
        return model()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidDocument([Problem("", f"body is not valid JSON: {exc.msg}", exc.lineno)]) from None
    except RecursionError:
        raise InvalidDocument([TOO_DEEP]) from None
    if (problem := too_deep(data)) is not None:
        raise InvalidDocument([problem])
    return _validated(model, data)


def query(request: web.Request, model: type[M]) -> M:
    """The validated query string: each parameter a field of model, an unknown one refused."""
    return _validated(model, dict(request.query))


def _validated(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidDocument(problems_from(exc, None, data, model)) from None
