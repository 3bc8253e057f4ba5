"""What the daemon needs of its config file, read without pydantic or YAML: a child
(`nodeagent check-config --output json`) validates the file with config.py's one definition
and prints it, defaults filled in and the join string decoded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nodeagent.children import AgentError, own_command
from nodeagent.client import Document
from nodeagent.host import Host
from nodeagent.wire.endpoint import Endpoint


class BadConfig(AgentError):
    """The config file is invalid; the message names file, line and field."""


@dataclass(frozen=True)
class DaemonSettings:
    """The config as the daemon uses it, from check-config's JSON document."""

    endpoints: list[Endpoint]  # the coordinator's replicas, each with its proxy
    ca_file: str | None
    ca_hash: str | None
    timeout: float
    state_dir: Path
    join_token: str | None
    heartbeat_seconds: float
    role: str
    ignore_prechecks: list[str]
    own_ntp_servers: bool  # the config names NTP servers: the cluster's do not replace them
    node_interface: str | None = None  # register with this interface's address
    node_address: str | None = None  # or with this address
    fallback_seconds: float = 600.0  # a coordinator moved to, silent this long: ask the old one
    precheck_recheck_seconds: float = 60.0  # while Pending, the longest wait between prechecks

    @classmethod
    def from_document(cls, document: Document) -> DaemonSettings:
        config = document["config"]
        coordinator = config["coordinator"]
        return cls(endpoints=[Endpoint(**e) for e in document["coordinator_endpoints"]],
                   ca_file=coordinator["ca_file"], ca_hash=document["ca_hash"],
                   timeout=coordinator["timeout"], state_dir=Path(config["state_dir"]),
                   join_token=config["join_token"],
                   heartbeat_seconds=config["heartbeat_seconds"], role=config["role"],
                   ignore_prechecks=config["ignore_prechecks"],
                   own_ntp_servers=bool(config["ntp"]["servers"]),
                   node_interface=config["node"]["interface"],
                   node_address=config["node"]["address"],
                   fallback_seconds=coordinator["fallback_seconds"],
                   precheck_recheck_seconds=config["precheck_recheck_seconds"])


async def load_settings(config_path: str, host: Host) -> DaemonSettings:
    """The config file, validated by `nodeagent check-config` in a child."""
    result = await own_command(host, "check-config", "--config", config_path,
                               "--output", "json")
    if result.returncode == 2:
        raise BadConfig(result.stderr.strip())
    if result.returncode != 0:
        raise AgentError(result.stderr.strip())
    return DaemonSettings.from_document(json.loads(result.stdout))
