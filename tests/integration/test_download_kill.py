"""A real `nodeagent run` killed with kill -9 in the middle of a coordinator artifact's
download (its first answer cut half-way by a relay, the retry far off) continues, once started
again, with a Range request from the bytes its state dir kept, and ends with the right file;
the relay counts that the coordinator sent the file about once."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

from tests.support.agent import AgentProcess
from tests.support.harness import running_coordinator
from tests.support.relay import relay
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


def test_an_agent_killed_mid_download_resumes_with_a_range(tmp_path: Path) -> None:
    with running_coordinator(tmp_path, cluster=CLUSTER, tls=False) as coordinator, \
            relay(coordinator.port, losing=ARTIFACT) as cutting:
        (coordinator.data / "artifacts" / "tool.bin").write_bytes(CONTENT)
        cutting.cut_after = len(CONTENT) // 2
        token = coordinator.cli("join-token", "create", "lab").stdout.strip()
        agent = AgentProcess(tmp_path / "agent")
        agent.root.mkdir(parents=True)
        agent.configure(f"join: {token}\ncoordinator: {{url: {cutting.url}}}\n"
                        "ignorePrechecks: [all]\nheartbeatSeconds: 1")
        agent.start()
        try:
            wait_until(lambda: bool(coordinator.admin.get("/v1/machines")), 60, "registration")
            machine = coordinator.admin.get("/v1/machines")[0]
            coordinator.cli("approve", machine["id"], "--role", "worker")
            partial = agent.state_dir / "cache" / "partial" / SHA
            wait_until(lambda: len(cutting.passed(ARTIFACT)) == 1 and partial.exists()
                       and partial.stat().st_size > 0, 60, "the cut download's bytes")
            agent.stop(signal.SIGKILL)
            held = partial.stat().st_size
            assert not (agent.root / "opt/bin/tool").exists()
            agent.start()
            wait_until(lambda: (agent.root / "opt/bin/tool").exists(), 60, "the download")
        finally:
            agent.stop()
    assert (agent.root / "opt/bin/tool").read_bytes() == CONTENT
    answers = cutting.passed(ARTIFACT)
    assert len(answers) == 2
    assert f"Range: bytes={held}-" in answers[1][0]
    assert sum(size for _, size in answers) < len(CONTENT) + 4096  # once, and two heads
