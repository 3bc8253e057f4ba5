"""schemathesis generates requests for every operation in /openapi.json (bodies, path and
documented query parameters) against a real coordinator process: not one may be answered with
a 5xx. Run once with an admin token and once with a machine's credential and its own id in
the paths, so agent endpoints and artifacts are fuzzed past authentication too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.builders import NOOP_CLUSTER
from tests.support.harness import ServedCoordinator, running_coordinator

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
# Per operation: enough to find a 5xx put back on an edge value of a documented query
# parameter (docs/coordinator.md, Security); FUZZ_EXAMPLES=500 for a deeper run.
EXAMPLES = os.environ.get("FUZZ_EXAMPLES", "25")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedCoordinator]:
    # Plain HTTP: the API is under test here, TLS has its own tests (test_trust.py).
    with running_coordinator(tmp_path_factory.mktemp("fuzz"), cluster=None, tls=False) as c:
        yield c
    # aiohttp logs the malformed-header probe it refused with 400; anything else is a bug.
    crashes = [t for t in c.log.read_text().split("Traceback")[1:]
               if "BadHttpMessage" not in t]
    assert not crashes, crashes[0][-3000:]


def fuzz(url: str, credential: str, *extra: str, config: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "schemathesis"), *(("--config-file", str(config)) if config else ()),
         "run", f"{url}/openapi.json", "--checks",
         "not_a_server_error", "--max-examples", EXAMPLES, "--phases", "examples,fuzzing",
         "--header", f"Authorization: Bearer {credential}", *extra],
        capture_output=True, text=True, timeout=600)


def test_no_operation_answers_a_5xx_to_an_admin(served: ServedCoordinator) -> None:
    served.admin.request("PUT", "/v1/clusters", text=NOOP_CLUSTER, content_type="application/yaml")
    result = fuzz(served.url, served.token_file.read_text().strip())
    assert result.returncode == 0, result.stdout[-4000:]
    assert "Server error" not in result.stdout


def test_no_agent_operation_answers_a_5xx_to_a_machine(served: ServedCoordinator) -> None:
    admin = served.admin
    admin.request("PUT", "/v1/clusters", text=NOOP_CLUSTER, content_type="application/yaml")
    token = admin.request("POST", "/v1/clusters/lab/join-tokens", body={})["token"]
    report = {"schema": "nodeagent.precheck/v1", "hostname": "fuzz", "role": "worker",
              "started_at": 0, "duration": 0, "ok": True,
              "summary": {}, "checks": []}
    machine = served.client(None).request("POST", "/v1/agent/register", body={
        "join_token": token, "hostname": "fuzz", "ip": None, "facts": {}, "precheck": report})
    config = served.data.parent / "schemathesis.toml"  # the machine's own id in paths
    config.write_text(f'[parameters]\n"path.machine_id" = "{machine["machine_id"]}"\n')
    result = fuzz(served.url, machine["credential"], "--include-path-regex",
                  "^/v1/(agent|artifacts)/", config=config)
    assert result.returncode == 0, result.stdout[-4000:]
