"""Where a coordinator replica is, in the standard library only: the config model and the
HTTP client both name it, and the coordinator's install plan reads the config model without
pulling in the agent's networking."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """One coordinator replica, and the proxy (if any) to reach it through."""

    url: str
    proxy: str | None = None
