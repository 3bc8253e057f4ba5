"""A real `nodeagent run` whose coordinator artifact's download is cut half-way continues
with a Range request from the bytes its state dir kept, and ends with the right file: killed
with kill -9 after the cut (the retry far off) and started again, or with its coordinator
killed -9 and served again while the transfer stalled half-way. The relay in front of the
coordinator counts that the coordinator sent the file about once."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from pathlib import Path

import pytest

from nodeagent import http_client
from tests.support.agent import AgentProcess
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.relay import Relay, relay
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

CONTENT = bytes(range(256)) * 32768  # 8 MiB
SHA = hashlib.sha256(CONTENT).hexdigest()
ARTIFACT = b"GET /v1/artifacts/"
CLUSTER = f"""\
name: lab
release: "1"
settings: {{retry: {{baseSeconds: 600, maxSeconds: 600}}}}
machineTypes:
  worker:
    - name: tool
      phase: prepare
      action: {{type: download, artifact: tool.bin, sha256: {SHA}, path: /opt/bin/tool}}
"""


def joined(coordinator: ServedCoordinator, via: str, directory: Path) -> AgentProcess:
    """An agent reaching the coordinator through via, started, registered and approved."""
    token = coordinator.cli("join-token", "create", "lab").stdout.strip()
    agent = AgentProcess(directory)
    agent.root.mkdir(parents=True)
    agent.configure(f"join: {token}\ncoordinator: {{url: {via}}}\n"
                    "ignorePrechecks: [all]\nheartbeatSeconds: 1")
    agent.start()
    wait_until(lambda: bool(coordinator.admin.all_machines()), 60, "registration")
    coordinator.cli("approve", coordinator.admin.all_machines()[0]["id"], "--role", "worker")
    return agent


def settled_size(path: Path) -> int:
    """path's size once it no longer grows (a killed process group's last child gone)."""
    before = path.stat().st_size
    time.sleep(0.3)
    return before if path.stat().st_size == before else 0


def resumed(agent: AgentProcess, cutting: Relay, held: int, at_most: int) -> None:
    """The download ended right, its second request a Range from the bytes held (at least
    held, at most at_most), and answered with only the rest."""
    assert (agent.root / "opt/bin/tool").read_bytes() == CONTENT
    answers = cutting.passed(ARTIFACT)
    assert len(answers) == 2
    start = int(answers[1][0].split("Range: bytes=")[1].split("-")[0])
    assert held <= start <= at_most
    assert 0 < answers[1][1] - (len(CONTENT) - start) < 2048  # the rest, and its headers


def test_an_agent_killed_mid_download_resumes_with_a_range(tmp_path: Path) -> None:
    with running_coordinator(tmp_path, cluster=CLUSTER, tls=False) as coordinator, \
            relay(coordinator.port, losing=ARTIFACT) as cutting:
        (coordinator.data / "artifacts" / "tool.bin").write_bytes(CONTENT)
        cutting.cut_after = len(CONTENT) // 2
        agent = joined(coordinator, cutting.url, tmp_path / "agent")
        try:
            partial = agent.state_dir / "cache" / "partial" / SHA
            wait_until(lambda: len(cutting.passed(ARTIFACT)) == 1 and partial.exists()
                       and partial.stat().st_size > 0, 60, "the cut download's bytes")
            agent.stop(signal.SIGKILL)
            held = wait_until(lambda: settled_size(partial), 10, "the killed child gone")
            assert not (agent.root / "opt/bin/tool").exists()
            agent.start()
            wait_until(lambda: (agent.root / "opt/bin/tool").exists(), 60, "the download")
        finally:
            agent.stop()
    resumed(agent, cutting, held, held)


def test_a_coordinator_killed_mid_transfer_is_resumed_from_once_back(tmp_path: Path) -> None:
    cluster = CLUSTER.replace("baseSeconds: 600, maxSeconds: 600", "baseSeconds: 0.5, maxSeconds: 1")
    with running_coordinator(tmp_path, cluster=cluster, tls=False) as coordinator, \
            relay(coordinator.port, losing=ARTIFACT) as cutting:
        (coordinator.data / "artifacts" / "tool.bin").write_bytes(CONTENT)
        cutting.cut_after, cutting.hold = len(CONTENT) // 2, threading.Event()
        agent = joined(coordinator, cutting.url, tmp_path / "agent")
        try:
            partial = agent.state_dir / "cache" / "partial" / SHA
            # The agent writes whole chunks: the last of the half is still in its read.
            wait_until(lambda: partial.exists() and partial.stat().st_size
                       >= len(CONTENT) // 2 - http_client.CHUNK, 60, "half the transfer")
            coordinator.stop(crash=True)
            held = partial.stat().st_size
            coordinator.start()
            cutting.hold.set()
            wait_until(lambda: (agent.root / "opt/bin/tool").exists(), 60, "the download")
        finally:
            agent.stop()
    # The bytes the agent was reading when the transfer stalled are written at the cut.
    resumed(agent, cutting, held, len(CONTENT) // 2)
