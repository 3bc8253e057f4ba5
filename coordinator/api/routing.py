"""What the API knows of each route, in one record: its aiohttp route, who may call it and
its OpenAPI operation are all derived from the table of these (api/routes.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Auth = Literal["open", "machine", "admin"]


@dataclass(frozen=True)
class Route:
    method: str  # GET, POST, ...
    path: str  # an aiohttp pattern: /v1/machines/{ref}
    handler: Handler
    summary: str
    auth: Auth  # open: anyone; machine: the machine's credential (checked by the handler); admin
    status: int = 200  # the success status
    body: type[BaseModel] | None = None
    body_optional: bool = False  # an empty body means every field's default
    answer: type[BaseModel] | None = None
    dry_run: bool = False  # a POST that changes nothing: read-only tokens may send it, no audit
    hands_out: bool = False  # a POST that changes nothing but hands out secrets: admin tokens
    # only and audited, yet answered while a pivot holds changes
    # (name, JSON schema) of each query parameter documented (schemathesis fuzzes them)
    query: tuple[tuple[str, dict[str, Any]], ...] = field(default=(), hash=False)

    @property
    def changes(self) -> bool:
        """Whether a call changes state: read-only tokens may not make it, and it is audited."""
        return self.method not in ("GET", "HEAD", "OPTIONS") and not self.dry_run


ROUTE_TABLE = web.AppKey("routes", tuple)
