"""Request bodies of the admin endpoints (the source of their schemas in /openapi.json) and
their queries: validated like every other payload, so a bad one is refused naming the field."""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from coordinator.domain.labels import change_problems
from coordinator.domain.machines.tokens import ADMIN_ROLES, parse_duration
from coordinator.domain.model import Role
from coordinator.domain.transfer.pivot import HTTPS_ONLY, not_a_certificate, not_https
from coordinator.domain.views.fleet import Fleet, parse_fleet
from nodeagent.wire.config import CoordinatorUrl
from nodeagent.wire.contract import Phase


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class RoleBody(_Body):
    role: Role | None = None


class ApproveBody(RoleBody):
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="labels the machine gets (Kubernetes syntax)")
    interface: str | None = Field(default=None, description="the machine's cluster address is "
                                  "this interface's IPv4, as its node reported it")
    ip: str | None = Field(default=None, description="the machine's cluster address: one its "
                           "node reported")

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return _checked(labels, [])

    @model_validator(mode="after")
    def _one_address(self) -> ApproveBody:
        if self.interface and self.ip:
            raise ValueError("give interface or ip, not both")
        return self


class LabelsBody(_Body):
    put: dict[str, str] = Field(default_factory=dict, alias="set",
                                description="labels to set (Kubernetes syntax)")
    remove: list[str] = Field(default_factory=list, description="keys of labels to remove")

    @model_validator(mode="after")
    def _valid(self) -> LabelsBody:
        _checked(self.put, self.remove)
        return self


def _checked(put: dict[str, str], remove: list[str]) -> dict[str, str]:
    problems = change_problems(put, remove)
    if problems:
        raise ValueError("; ".join(problems))
    return put


class JoinTokenBody(_Body):
    ttl: str = Field(default="24h", description="90s, 15m, 24h, 7d; 0 never expires")
    max_uses: int | None = Field(default=None, ge=1, le=1_000_000,
                                 description="registrations allowed; null: unlimited")
    auto_approve: bool = Field(default=False, description="a pool token only: its machines are "
                               "approved into the pool once their prechecks pass")

    @field_validator("ttl")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class ReissueBody(_Body):
    ttl: str = Field(default="1h", description="how long the reissue string is good for: 90s, "
                     "15m, 1h, 7d (never forever)")

    @field_validator("ttl")
    @classmethod
    def _duration(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("a reissue string must expire: give a duration above 0")
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


def _https(value: object) -> object:
    """A pivot's or a move's target URL is https (domain/transfer/pivot.py says why)."""
    if isinstance(value, str) and (why := not_https(value)) is not None:
        raise ValueError(why)
    return value


TargetUrl = Annotated[CoordinatorUrl, BeforeValidator(_https)]
B = TypeVar("B", bound=BaseModel)


def _required(body: B, ca: str | None, field: str) -> B:
    """A target's CA (or its pin) is required; the message names the field and why."""
    if ca is None:
        raise ValueError(f"{field}: required: {HTTPS_ONLY}")
    return body


class PivotBody(_Body):
    """A pivot to begin, or resume (POST /v1/pivot): the target and how to reach it."""

    to: Annotated[str, BeforeValidator(_https)] = Field(
        pattern=r"^https://[^/\s]+$", description="the target coordinator's URL (https only)")
    ca_pem: str | None = Field(default=None, max_length=65536, description="the target's CA "
                               "certificate (PEM), required: every connection to the target "
                               "is verified against it")
    token: str = Field(min_length=16, max_length=256, description="an admin token of the "
                       "target, kept sealed: the read-only copy is refreshed with it")

    @field_validator("ca_pem")
    @classmethod
    def _certificate(cls, value: str | None) -> str | None:
        if value is not None and (why := not_a_certificate(value)) is not None:
            raise ValueError(why)
        return value

    @model_validator(mode="after")
    def _with_ca(self) -> PivotBody:
        return _required(self, self.ca_pem, "caPem")


class MoveTargetBody(_Body):
    """Where every agent is to move (PUT /v1/move-target): the target coordinator."""

    url: TargetUrl = Field(description="the target coordinator's URL, as agents reach it "
                           "(https only)")
    urls: list[TargetUrl] = Field(default_factory=list, max_length=16,
                                  description="its other replicas, if any (https only)")
    ca_pin: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$",
                               description="sha256:<hex> of the target's CA certificate (DER), "
                               "as its join strings carry it; required: agents send their "
                               "credential only to a target whose CA matches it")

    @model_validator(mode="after")
    def _pinned(self) -> MoveTargetBody:
        return _required(self, self.ca_pin, "caPin")

    @property
    def all_urls(self) -> list[str]:
        return list(dict.fromkeys(u.rstrip("/") for u in (self.url, *self.urls)))


def _fleet(value: object) -> object:
    return parse_fleet(value) if isinstance(value, str) else value


class RenderQuery(_Body):
    """What `GET|POST /v1/clusters/NAME/render` renders: the query string's parameters."""

    machine: str | None = Field(default=None, description="only this machine (id or hostname)")
    phase: Phase | None = Field(default=None, description="only this phase")
    fleet: Annotated[Fleet | None, BeforeValidator(_fleet)] = Field(
        default=None, description="MANAGERS,WORKERS: a hypothetical fleet instead of the "
        "cluster's machines")


class StatusQuery(_Body):
    """What `GET /v1/clusters/NAME/status` includes: the query string's parameters."""

    machines: bool = Field(default=True, description="every machine's view too (false: the "
                           "stages, counts and rollout alone, as the dashboard asks)")


class ApplyQuery(_Body):
    """How `PUT /v1/clusters` and the upgrade dry run judge a Kubernetes version change: the
    query string's parameters."""

    allow_downgrade: bool = Field(default=False, description="accept a lower "
                                  "settings.kubernetes.version than the cluster runs (one minor "
                                  "at most), recorded in an event; refused 422 otherwise")


class DeleteQuery(_Body):
    """How `DELETE /v1/machines/REF` deletes: the query string's parameters."""

    force: bool = Field(default=False, description="delete a manager even though the quorum "
                        "guard refuses (managers one at a time, a majority left)")
    skip_reset: bool = Field(default=False, description="remove the record at once: no drain, "
                             "no reset items, no Node deletion")
    cluster: str | None = Field(default=None, description="the machine's cluster, when its "
                                "hostname is in several")
