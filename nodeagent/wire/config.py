"""The agent's config file (/etc/nodeagent/config.yaml): one validated model, camelCase keys."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.wire import joinstring
from nodeagent.wire.contract import Role
from nodeagent.wire.protocol import NtpSettings, ProxySettings
from nodeagent.wire.validation import InvalidDocument, Problem, load_model

DEFAULT_CONFIG_PATH = "/etc/nodeagent/config.yaml"
DEFAULT_CACHE_MAX_GIB = 4.0



class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


def _coordinator_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    # Caught here, not when the coordinator check parses the URL and crashes on it.
    parts = urlsplit(value)
    if not parts.hostname:
        raise ValueError("must name a host, e.g. https://coordinator.example:8443")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("port must be a number from 1 to 65535")
    return value


# Validated one by one so that a bad entry is reported as coordinator.urls[N].
CoordinatorUrl = Annotated[str, AfterValidator(_coordinator_url)]


class CoordinatorConfig(_Section):
    url: CoordinatorUrl | None = None
    urls: list[CoordinatorUrl] = Field(
        default_factory=list, description="other replicas of the coordinator (sharing its "
        "database and CA): the agent moves on to the next when one does not answer")
    ca_file: str | None = Field(default=None, description="CA to trust for an https coordinator "
                                "(else the one pinned by the join string)")
    health_path: str = "/healthz"
    fallback_seconds: float = Field(
        default=600.0, ge=1, le=86400, description="after a move to another coordinator (a "
        "pivot), how long the new one may not answer before the agent asks the one it came "
        "from whether the move still stands (docs/agent.md)")
    timeout: float = Field(default=2.0, gt=0, le=60)

    @property
    def all_urls(self) -> list[str]:
        """url first, then the other replicas, each once."""
        return list(dict.fromkeys(u for u in (self.url, *self.urls) if u))


class NtpConfig(NtpSettings):
    """The cluster's NTP section plus how long this node waits for each server."""

    timeout: float = Field(default=1.0, gt=0, le=30)


class Thresholds(_Section):
    # to_camel would spell it minVarFreeGib; the documented key keeps the unit's capitals.
    min_var_free_gib: float = Field(default=5.0, ge=0, alias="minVarFreeGiB")
    check_timeout: float = Field(default=3.0, gt=0, le=120)


class NodeConfig(_Section):
    """Which of its addresses the node registers with (its ${machine.ip}): by default the
    default-route interface's, often not the cluster network's."""

    interface: str | None = Field(default=None, description="register with this interface's "
                                  "IPv4 address, e.g. eth1")
    address: str | None = Field(default=None, description="register with this address, one "
                                "of the node's own")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return None if value is None else str(ipaddress.ip_address(value))

    @model_validator(mode="after")
    def _one(self) -> NodeConfig:
        if self.interface and self.address:
            raise ValueError("give interface or address, not both")
        return self


class AgentConfig(_Section):
    role: Role = "worker"
    join: str | None = Field(default=None, description="join string: coordinator URL, join "
                             "token and CA hash in one (coordinator join-token create)")
    join_token: str | None = Field(default=None, description="used once, to register")
    state_dir: str = "/var/lib/nodeagent"
    cache_max_gib: float = Field(
        default=DEFAULT_CACHE_MAX_GIB, ge=0, alias="cacheMaxGiB", description="downloads kept in "
        "the state dir's cache/ by sha256, least recently used dropped past this size")
    heartbeat_seconds: float = Field(default=10.0, gt=0, le=300)
    precheck_recheck_seconds: float = Field(
        default=60.0, gt=0, le=3600, description="while Pending, the longest wait between two "
        "runs of the prechecks (the wait while they pass)")
    ignore_prechecks: list[str] = Field(
        default_factory=list, description="checks whose failures only warn, as --ignore"
    )
    coordinator: CoordinatorConfig = Field(default_factory=CoordinatorConfig)
    ntp: NtpConfig = Field(default_factory=NtpConfig)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    node: NodeConfig = Field(default_factory=NodeConfig)

    @field_validator("join")
    @classmethod
    def _join(cls, value: str | None) -> str | None:
        if value is not None:
            joinstring.decode(value)  # BadJoinString is a ValueError: reported as `join`
        return value

    @model_validator(mode="after")
    def _join_fills_in(self) -> AgentConfig:
        """A join string supplies the coordinator URL and token unless they are given."""
        if self.join is not None:
            decoded = joinstring.decode(self.join)
            if self.coordinator.url is None:
                self.coordinator.url = decoded.url
            if self.join_token is None:
                self.join_token = decoded.token
        return self

    @property
    def ca_hash(self) -> str | None:
        return joinstring.decode(self.join).ca_hash if self.join else None


def load_config(path: str | None) -> AgentConfig:
    """The config at path; defaults when path is None. Raises InvalidDocument naming file and line."""
    if path is None:
        return AgentConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidDocument([Problem("", f"cannot read: {exc.strerror}")], path) from None
    return load_model(AgentConfig, text, path)
