"""The daemon's children: its own command line, run in a child process whose memory goes back
to the node when it exits. `check-config`, `precheck` and `facts` run to completion and print
JSON; `apply` runs one phase, the assignment on its stdin and a report per line on its stdout.
The daemon never reads its config file itself: `check-config` validates it with its one
definition (nodeagent/wire/config.py) and prints it, defaults filled in and the join string
decoded, and the daemon keeps what it needs of that (`DaemonSettings`).

Like the daemon, this module imports no pydantic and no YAML: the children load them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.client import Document
from nodeagent.host import CommandResult, Host
from nodeagent.wire.endpoint import Endpoint

log = logging.getLogger("nodeagent")
CHILD_TIMEOUT_SECONDS = 120.0
STOP_SECONDS = 30.0  # for a phase's child to stop its running item before it is killed
# How a `nodeagent apply` child (nodeagent/phase.py) ends: every item applied, one failed
# retry.maxAttempts times, or stopped (stdin closed, SIGTERM). Any other exit (a crash, a
# journal it cannot read) and the daemon starts it again.
EXIT_APPLIED, EXIT_GAVE_UP, EXIT_STOPPED = 0, 3, 4


class AgentError(Exception):
    """A condition the agent cannot recover from by retrying (bad token, removed machine)."""


def own_argv() -> list[str]:
    """How to run this agent's own command line: a frozen bundle is its own executable."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "nodeagent"]


async def close_and_wait(child: asyncio.subprocess.Process, seconds: float) -> None:
    """End a child that lives until its stdin closes: close it, and kill the child if it is
    not gone within seconds."""
    assert child.stdin is not None
    child.stdin.close()
    try:
        await asyncio.wait_for(child.wait(), seconds)
    except TimeoutError:
        child.kill()
        await child.wait()


async def own_command(host: Host, *args: str) -> CommandResult:
    """`nodeagent ARGS` in a child, given CHILD_TIMEOUT_SECONDS to finish."""
    try:
        return await host.run([*own_argv(), *args], timeout=CHILD_TIMEOUT_SECONDS)
    except TimeoutError:
        raise AgentError(f"`nodeagent {args[0]}` did not finish within "
                         f"{CHILD_TIMEOUT_SECONDS:.0f}s") from None


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


async def checked_output(host: Host, *args: str) -> str:
    """Output of `nodeagent ARGS --root ROOT` (prechecks or facts) in a child: they load
    DNS, netlink, NTP and process-table libraries the idle daemon has no use for. Exit 1
    (a check failed) is an answer too."""
    result = await own_command(host, *args, "--root", str(host.root))
    if result.returncode not in (0, 1):
        raise AgentError(f"`nodeagent {args[0]}` failed (exit {result.returncode}): "
                         f"{result.stderr.strip()}")
    return result.stdout


async def apply_phase(assignment: Document, config_path: str, root: Path,
                      submit: Callable[[Document], None], lock: int | None = None) -> int:
    """One `nodeagent apply` child, its exit code: the assignment on its stdin, each report
    it prints handed to submit; its log lines go to this daemon's stderr. Cancelled, it
    closes the child's stdin, which stops the running item, and kills it if it takes too long.
    The child inherits the descriptor lock (the state dir's, statelock.py): a child left
    stopping by a dead daemon keeps the state dir from another agent until it is gone."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    child = await asyncio.create_subprocess_exec(
        *own_argv(), "apply", "--config", config_path, "--root", str(root),
        "--log-level", level, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        pass_fds=() if lock is None else (lock,))
    assert child.stdin is not None and child.stdout is not None
    try:
        with contextlib.suppress(ConnectionError):  # it died at once: its exit code says
            child.stdin.write(json.dumps(assignment).encode() + b"\n")
            await child.stdin.drain()
        async for line in child.stdout:
            try:
                submit(json.loads(line))
            except (ValueError, KeyError, TypeError):
                log.error("`nodeagent apply` printed something that is not a report: %r",
                          line[:200])
        return await child.wait()
    finally:
        if child.returncode is None:
            await close_and_wait(child, STOP_SECONDS)
