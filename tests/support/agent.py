"""Running the installed `nodeagent` command the way an operator does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.support.harness import ServedCoordinator
from tests.support.netns import with_hostname
from tests.support.requirements import require_root
from tests.support.waiting import wait_until

# The console script installed next to the interpreter running the tests (the venv's).
NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))


def precheck_argv(root: Path | str, *args: str, own_pids: bool = False) -> list[str]:
    """`nodeagent precheck --root root args...`; with own_pids, in a fresh PID namespace
    with its own /proc, so only the agent's own processes are in its process table."""
    argv = [NODEAGENT, "precheck", "--root", str(root), *args]
    if own_pids:
        argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv]
    return argv


def checks_by_name(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """The checks of a `--output json` run, by name; fails loudly on anything but JSON."""
    assert result.returncode in (0, 1), (result.returncode, result.stderr)
    report = json.loads(result.stdout)
    return {check["name"]: check for check in report["checks"]}


@dataclass
class AgentProcess:
    """`nodeagent run` on this host, its root, config (agent.yaml) and log (agent.log) under
    directory: started, signalled and started again at will, as systemd would. With a
    hostname, in a UTS namespace of its own that has it: several agents on one host then
    register as several machines."""

    directory: Path
    hostname: str | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def state_dir(self) -> Path:
        return self.root / "var/lib/nodeagent"

    @property
    def log(self) -> Path:
        return self.directory / "agent.log"

    def configure(self, settings: str) -> None:
        """The config file: settings (YAML), with the state dir under the root."""
        (self.directory / "agent.yaml").write_text(f"{settings}\nstateDir: {self.state_dir}\n")

    def start(self) -> None:
        """In a session of its own, so that stop() reaches its children too."""
        argv = [NODEAGENT, "run", "--config", str(self.directory / "agent.yaml"), "--root",
                str(self.root)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                with_hostname(self.hostname, argv) if self.hostname else argv, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Signal it and its children (with SIGKILL: as systemd kills a unit's cgroup); its
        exit status once it is gone."""
        assert self.process is not None, "never started"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        return self.process.wait(timeout=30)


def joined_agent(served: ServedCoordinator, directory: Path, hostname: str,
                 settings: str = "") -> AgentProcess:
    """An agent with a join string of cluster lab, its hostname and these settings (YAML),
    prechecks ignored, started."""
    agent = AgentProcess(directory, hostname=hostname)
    agent.root.mkdir(parents=True)
    join = served.cli("join-token", "create", "lab").stdout.strip()
    agent.configure(f"join: {join}\nignorePrechecks: [all]\n{settings}")
    agent.start()
    return agent


@contextlib.contextmanager
def agent_of(coordinator: ServedCoordinator, tmp: Path) -> Iterator[psutil.Process]:
    """`nodeagent run` with a join string of cluster lab, its root at tmp/root; registered
    when yielded. Started again on the same tmp, it is the same agent restarted."""
    join = coordinator.cli("join-token", "create", "lab").stdout.strip()
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    config = tmp / "agent.yaml"
    config.write_text(f"join: {join}\nstateDir: {root}/var/lib/nodeagent\n"
                      "heartbeatSeconds: 1\nignorePrechecks: [all]\n")
    with (tmp / "agent.log").open("ab") as log:
        process = subprocess.Popen([NODEAGENT, "run", "--config", str(config), "--root",
                                    str(root)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: bool(coordinator.admin.all_machines()), 60, "registration",
                   interval=0.2)
        yield psutil.Process(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=15)


@contextlib.contextmanager
def joined_fleet(coordinator: ServedCoordinator, tmp: Path, count: int,
                 settings: str = "") -> Iterator[list[AgentProcess]]:
    """count agents named node-0... (joined_agent's, root), started (not yet registered)
    when yielded and stopped after. settings: more of their config (YAML lines)."""
    require_root()
    started: list[AgentProcess] = []
    try:
        for index in range(count):
            started.append(joined_agent(coordinator, tmp / f"agent-{index}", f"node-{index}",
                                        settings))
        yield started
    finally:
        for agent in started:
            agent.stop()
