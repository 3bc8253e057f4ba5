"""Words both sides of the wire share, in the standard library only: the agent daemon, which
never loads pydantic, and the coordinator use the same spelling of roles and phases."""

from __future__ import annotations

from typing import Literal

Role = Literal["manager", "worker"]
ROLES: tuple[Role, ...] = ("manager", "worker")
Phase = Literal["prepare", "deploy", "upgrade", "reconfigure", "reset", "postdeploy"]
PHASES: tuple[Phase, ...] = ("prepare", "deploy", "upgrade", "reconfigure", "reset", "postdeploy")
