"""A real `coordinator serve` process on a loopback port, and agents simulated over its HTTP API
(registration and item reports exactly as nodeagent sends them), for CLI, API and browser tests."""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.client import AdminClient, ClientError
from nodeagent.prechecks.runner import summarize
from nodeagent.protocol import CheckResult, PrecheckReport, Severity, StateItem, Status
from tests.support.ports import free_port
from tests.support.process import serving
from tests.support.waiting import wait_until

COORDINATOR = str(Path(sys.executable).with_name("coordinator"))

# Exec items that never run here: the simulated agents report their results.
CLUSTER = """\
name: lab
release: "1.0"
settings: {workerBatchSize: 2}
machineTypes:
  manager:
    - {name: base, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: base, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: runtime, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}
"""

# One worker item that does nothing: for tests about the API and trust, not the rollout.
NOOP_CLUSTER = """\
name: lab
release: "1"
machineTypes:
  worker:
    - {name: noop, phase: prepare, action: {type: exec, argv: ["true"]}}
"""


def precheck_report(hostname: str, failing: bool = False) -> dict[str, Any]:
    checks = [CheckResult(name="os", severity=Severity.HARD,
                          status=Status.FAIL if failing else Status.PASS,
                          message="Plan 9 is not supported" if failing else "ok", duration=0.0)]
    return PrecheckReport(hostname=hostname, role="worker", started_at=0, duration=0,
                          ok=not failing, summary=summarize(checks),
                          checks=checks).model_dump(mode="json", by_alias=True)


@dataclass
class Agent:
    """A registered machine, driven by the test instead of nodeagent."""

    hostname: str
    machine_id: str
    client: AdminClient

    def assignment(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.get(f"/v1/agent/machines/{self.machine_id}/assignment")
        return result

    def report(self, item: str, status: str, attempt: int = 1, output: str = "",
               error: str = "", exit_code: int | None = 0, seconds: float = 1.5) -> None:
        """Report an item of the current assignment, as the agent's runner does."""
        assignment = self.assignment()
        (found,) = [i for i in assignment["items"] if i["name"] == item]
        started = time.time() - seconds
        body = {"item": item, "fingerprint": StateItem.model_validate(found).fingerprint(),
                "phase": assignment["phase"], "status": status, "attempt": attempt,
                "started_at": started, "output": output, "error": error}
        if status != "running":
            body.update(finished_at=started + seconds, exit_code=exit_code)
            if status == "failed":
                body["next_retry_at"] = time.time() + 30
        self.client.request("POST", f"/v1/agent/machines/{self.machine_id}/reports", body=body)

    def finish_phase(self) -> None:
        for item in self.assignment()["items"]:
            self.report(item["name"], "succeeded", output=f"{item['name']} done\n")


@dataclass
class ServedCoordinator:
    """`coordinator serve` from a data dir on the URL's port, stopped and started at will (a
    restarted one is where the agents look). Plain HTTP (--insecure-http) when the URL says
    http. prefix (e.g. nsenter into a network namespace) runs it and its CLI: then only cli()
    reaches it, not admin or client() from this process."""

    url: str
    data: Path
    log: Path
    serve_args: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()
    agents: dict[str, Agent] = field(default_factory=dict)  # by hostname, as registered
    process: subprocess.Popen[bytes] | None = None
    _serving: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @functools.cached_property
    def admin(self) -> AdminClient:
        """With the token init (or, over plain HTTP, serve) wrote."""
        return self.client(self.token_file.read_text().strip())

    @property
    def tls(self) -> bool:
        return self.url.startswith("https:")

    def start(self) -> None:
        """Serve, and return once it answers; fail with its log if it exits first."""
        port = self.url.rsplit(":", 1)[1]
        argv = [*self.prefix, COORDINATOR, "serve", "--data-dir", str(self.data),
                "--listen", f"127.0.0.1:{port}", *([] if self.tls else ["--insecure-http"]),
                *self.serve_args]
        self.process = self._serving.enter_context(serving(
            argv, self.log, self._answers, f"coordinator on port {port}", timeout=30,
            interval=0.1))

    def stop(self, crash: bool = False) -> None:
        """Terminate it (or, with crash, SIGKILL it: no shutdown code runs) and wait."""
        if self.process is None:
            return
        if crash:
            self.process.kill()
        self._serving.close()  # terminates (a no-op after the kill) and waits
        self.process = None

    def _answers(self) -> bool:
        if self.prefix:  # this process cannot reach the namespace it serves in
            return self.cli("cluster", "get", ok=False).returncode == 0
        try:
            AdminClient(self.url, None, timeout=1, ca_file=self._ca).get("/healthz")
        except ClientError:
            return False
        return True

    @property
    def pid(self) -> int:
        assert self.process is not None, "not running"
        return self.process.pid

    @property
    def token_file(self) -> Path:
        return self.data / "admin.token"

    @property
    def ca_file(self) -> Path:
        return self.data / "pki" / "ca.crt"

    @property
    def _ca(self) -> str | None:
        return str(self.ca_file) if self.tls else None

    def client(self, token: str | None) -> AdminClient:
        return AdminClient(self.url, token, ca_file=self._ca)

    def cli_argv(self, *args: str) -> list[str]:
        return [*self.prefix, COORDINATOR, "--url", self.url, "--token-file",
                str(self.token_file), *(["--ca", str(self.ca_file)] if self.tls else []), *args]

    def cli(self, *args: str, ok: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.cli_argv(*args), capture_output=True, text=True,
                                timeout=timeout, check=False)
        if ok:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def cli_json(self, *args: str, timeout: float = 30) -> Any:
        return json.loads(self.cli(*args, "--output", "json", timeout=timeout).stdout)

    def register(self, hostname: str, failing: bool = False) -> Agent:
        token = self.admin.request("POST", "/v1/clusters/lab/join-tokens")["token"]
        answer = self.admin.request("POST", "/v1/agent/register", body={
            "join_token": token, "hostname": hostname, "ip": "127.0.0.1", "facts": {},
            "precheck": precheck_report(hostname, failing)})
        agent = self.agents[hostname] = Agent(hostname, answer["machine_id"],
                                              self.client(answer["credential"]))
        return agent

    def machine(self, hostname: str) -> dict[str, Any]:
        result: dict[str, Any] = self.admin.get(f"/v1/machines/{hostname}")
        return result

    def wait_state(self, hostname: str, state: str, timeout: float = 10) -> None:
        wait_until(lambda: self.machine(hostname)["state"] == state, timeout, f"{hostname} in {state}")


@contextlib.contextmanager
def running_coordinator(tmp: Path, cluster: str | None = CLUSTER, serve_args: Sequence[str] = (),
                        prefix: Sequence[str] = (), tls: bool = True) -> Iterator[ServedCoordinator]:
    """`coordinator serve` on a free 127.0.0.1 port from tmp/coordinator-data, with `cluster`
    applied. HTTPS with its own CA, made by `coordinator init` unless the data dir has one (a
    copy of another's carries its CA and machines over); tls=False: plain HTTP, no init.
    serve_args go to `serve` (e.g. --register-rate 0); prefix: see Coordinator."""
    port = free_port()
    data = tmp / "coordinator-data"
    if tls and not (data / "pki").exists():
        subprocess.run([COORDINATOR, "init", "--data-dir", str(data), "--listen",
                        f"127.0.0.1:{port}", "--name", "127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
    served = ServedCoordinator(f"{'https' if tls else 'http'}://127.0.0.1:{port}", data,
                         tmp / "coordinator.log", tuple(serve_args), tuple(prefix))
    try:
        served.start()
        if cluster:
            served.admin.request("PUT", "/v1/clusters", text=cluster,
                                 content_type="application/yaml")
        yield served
    finally:
        served.stop()
