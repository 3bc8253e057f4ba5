"""Where a coordinator replica is: stdlib only, so that what names it (the config model, which
the coordinator's install plan validates too) loads no HTTP client and no asyncio."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """One coordinator replica, and the proxy (if any) to reach it through."""

    url: str
    proxy: str | None = None
