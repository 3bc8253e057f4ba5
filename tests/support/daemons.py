"""Many real agent daemons (nodeagent.daemon.Agent, its poll loop, heartbeats and backoff as
they are) in one process, for bench scripts that measure the agent's own behaviour against a
served coordinator. Each has its own state dir and an identity registered beforehand; its
prechecks (a child process per run) are answered by a canned report instead: a hundred
children would measure the machine, not the agents.

Run as `python -c RUN_DAEMONS PATH PLAN` from a directory holding nothing importable:
PYTHONPATH then says which revision's nodeagent runs (see tests/support/revisions.py), and
only the standard library and nodeagent are imported, which every revision has.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from nodeagent.children import DaemonSettings
from nodeagent.daemon import Agent
from nodeagent.host import CommandResult, Host
from nodeagent.identity import IDENTITY_FILE, Identity, save_identity
from nodeagent.wire.endpoint import Endpoint

# The argv prefix that runs this file (its path and the plan's follow) as `__main__`.
RUN_DAEMONS = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


class CannedHost(Host):
    """The node as the agent sees it, but `nodeagent precheck` answers this report at once."""

    def __init__(self, root: Path, report: dict[str, Any]) -> None:
        super().__init__(root)
        self.report = json.dumps(report)

    async def run(self, argv: list[str], timeout: float = 10.0) -> CommandResult:
        if "precheck" not in argv:
            raise RuntimeError(f"a benched agent runs no {argv}")
        return CommandResult(tuple(argv), 0, self.report, "")


def agent(plan: dict[str, Any], machine: dict[str, Any]) -> Agent:
    """A registered agent of plan (the coordinator's url and CA, the heartbeat) for machine
    (its id, credential, state dir and precheck report)."""
    state = Path(machine["state_dir"])
    state.mkdir(parents=True, exist_ok=True)
    save_identity(state / IDENTITY_FILE,
                  Identity(machine["machine_id"], machine["credential"], time.time()))
    settings = DaemonSettings(
        endpoints=[Endpoint(plan["url"])], ca_file=plan["ca_file"], ca_hash=None, timeout=2.0,
        state_dir=state, join_token=None, heartbeat_seconds=plan["heartbeat_seconds"],
        role="worker", ignore_prechecks=[], own_ntp_servers=False)
    return Agent(settings, CannedHost(state, machine["precheck"]), str(state / "agent.yaml"))


async def run(plan: dict[str, Any]) -> None:
    await asyncio.gather(*(agent(plan, machine).run() for machine in plan["machines"]))


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(run(json.loads(Path(sys.argv[2]).read_text())))
