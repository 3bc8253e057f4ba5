"""Request bodies of the admin endpoints (the source of their schemas in /openapi.json) and
their queries: validated like every other payload, so a bad one is refused naming the field."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from coordinator.domain.fleet import Fleet, parse_fleet
from coordinator.domain.model import Role
from coordinator.domain.tokens import ADMIN_ROLES, parse_duration
from nodeagent.contract import Phase


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class RoleBody(_Body):
    role: Role | None = None


class JoinTokenBody(_Body):
    ttl: str = Field(default="24h", description="90s, 15m, 24h, 7d; 0 never expires")
    max_uses: int | None = Field(default=None, ge=1, le=1_000_000,
                                 description="registrations allowed; null: unlimited")

    @field_validator("ttl")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class AdminTokenBody(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._@-]*$")
    role: str = Field(json_schema_extra={"enum": list(ADMIN_ROLES)})

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if value not in ADMIN_ROLES:
            raise ValueError(f"must be one of {', '.join(ADMIN_ROLES)}")
        return value


def _fleet(value: object) -> object:
    return parse_fleet(value) if isinstance(value, str) else value


class RenderQuery(_Body):
    """What `GET|POST /v1/clusters/NAME/render` renders: the query string's parameters."""

    machine: str | None = Field(default=None, description="only this machine (id or hostname)")
    phase: Phase | None = Field(default=None, description="only this phase")
    fleet: Annotated[Fleet | None, BeforeValidator(_fleet)] = Field(
        default=None, description="MANAGERS,WORKERS: a hypothetical fleet instead of the "
        "cluster's machines")
