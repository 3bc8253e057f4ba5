"""A coordinator artifact cut midway continues where it stopped: the real coordinator's
artifact route (HTTP Range, If-Range) behind a relay that cuts its first answer, the agent's
own client and download item; and a node with the artifact in its cache asks nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import pytest

from nodeagent.client import CoordinatorClient
from nodeagent.http_client import Body
from nodeagent.wire.endpoint import Endpoint
from tests.support.harness import in_process_coordinator
from tests.support.items import apply, make_item
from tests.support.relay import relay

pytestmark = pytest.mark.integration

CONTENT = bytes(range(256)) * 8192  # 2 MiB
SHA = hashlib.sha256(CONTENT).hexdigest()
HALF = len(CONTENT) // 2


async def test_a_cut_artifact_resumes_with_a_range_and_is_not_fetched_again(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "coordinator").mkdir()
    item = make_item("tool", {"type": "download", "artifact": "tool.bin", "sha256": SHA,
                              "path": "/opt/bin/tool"})
    async with in_process_coordinator(tmp_path / "coordinator") as coordinator:
        (tmp_path / "coordinator" / "tool.bin").write_bytes(CONTENT)
        agent = await coordinator.register("node-1")
        with relay(coordinator.client.port, losing=b"GET /v1/artifacts/") as cutting:
            cutting.cut_after = HALF
            client = CoordinatorClient([Endpoint(cutting.url)])

            async def artifacts(name: str, headers: Mapping[str, str]) -> Body:
                return await client.artifact(agent["credential"], name, headers)

            first = await apply(item, root, artifacts=artifacts)
            assert not first.succeeded and "kept for the next attempt" in first.error
            second = await apply(item, root, artifacts=artifacts)
            assert second.succeeded, second.error
            assert "resumed after the" in second.output
            (root / "opt/bin/tool").unlink()
            third = await apply(item, root, artifacts=artifacts)
    assert third.succeeded and "from the node's cache" in third.output
    assert (root / "opt/bin/tool").read_bytes() == CONTENT
    answers = cutting.passed(b"GET /v1/artifacts/")
    assert len(answers) == 2  # the cut answer and the rest: the re-run asked nothing
    held = int(answers[1][0].split("Range: bytes=")[1].split("-")[0])
    assert 0 < held < len(CONTENT)
    assert "If-Range: " in answers[1][0]
    # Bodies: what the cut let through, then only what the node did not hold (plus headers).
    assert sum(size for _, size in answers) < len(CONTENT) + 2048
