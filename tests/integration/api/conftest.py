"""The coordinator's HTTP API in-process on a real SQLite store, with a clock tests move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from coordinator.api.app import create_app
from coordinator.api.context import Presentation
from coordinator.service.coordinator import Coordinator
from coordinator.store.sqlite import SQLiteStore
from nodeagent.prechecks.runner import summarize
from nodeagent.protocol import CheckResult, PrecheckReport, Severity, StateItem, Status

CLUSTER = """\
name: lab
release: "1.0"
settings: {workerBatchSize: 2, heartbeatTimeoutSeconds: 30}
machineTypes:
  manager:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
    - {name: wipe, phase: reset, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    client: TestClient
    coordinator: Coordinator
    clock: Clock
    admin: dict[str, str]

    async def call(self, method: str, path: str, status: int, **kwargs: Any) -> Any:
        kwargs.setdefault("headers", self.admin)
        response = await self.client.request(method, path, **kwargs)
        body = await response.json()
        assert response.status == status, body
        return body

    async def join_token(self) -> str:
        return (await self.call("POST", "/v1/clusters/lab/join-tokens", 201))["token"]

    async def registration(self, hostname: str, join_token: str,
                           failing: bool = False) -> dict[str, Any]:
        """The body an agent on hostname sends to register."""
        checks = [CheckResult(name="os", severity=Severity.HARD,
                              status=Status.FAIL if failing else Status.PASS,
                              message="Plan 9 is not supported" if failing else "ok",
                              duration=0.0)]
        report = PrecheckReport(hostname=hostname, role="worker", started_at=0, duration=0,
                                ok=not failing, summary=summarize(checks), checks=checks)
        return {"join_token": join_token, "hostname": hostname, "ip": "198.18.0.9",
                "facts": {}, "precheck": report.model_dump(mode="json", by_alias=True)}

    async def register(self, hostname: str, failing: bool = False) -> dict[str, str]:
        body = await self.registration(hostname, await self.join_token(), failing)
        return await self.call("POST", "/v1/agent/register", 201, json=body, headers={})

    async def assignment(self, agent: dict[str, str], after: int = 0, wait: float = 0) -> Any:
        return await self.call(
            "GET", f"/v1/agent/machines/{agent['machine_id']}/assignment?after={after}&wait={wait}",
            200, headers={"Authorization": f"Bearer {agent['credential']}"})

    async def heartbeat(self, agent: dict[str, str]) -> None:
        await self.call("POST", f"/v1/agent/machines/{agent['machine_id']}/heartbeat", 200,
                        headers={"Authorization": f"Bearer {agent['credential']}"})

    async def approved_workers(self, count: int, admin: Env | None = None
                               ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """count workers registered here and approved (through admin, e.g. another replica),
        after a reconcile pass here: their agents, and the first item they are assigned."""
        agents = [await self.register(f"w{n:02}") for n in range(count)]
        for agent in agents:
            await (admin or self).call("POST", f"/v1/machines/{agent['machine_id']}/approve",
                                       200, json={"role": "worker"})
        await self.coordinator.reconciler.reconcile_once()
        return agents, (await self.assignment(agents[0]))["items"][0]

    async def report(self, agent: dict[str, str], item: dict[str, Any], phase: str,
                     status: str = "succeeded", expect: int = 200, **fields: Any) -> Any:
        """Report one item of an assignment as the agent's runner does; the answer's body."""
        return await self.call(
            "POST", f"/v1/agent/machines/{agent['machine_id']}/reports", expect,
            headers={"Authorization": f"Bearer {agent['credential']}"},
            json={"item": item["name"], "fingerprint": StateItem.model_validate(item).fingerprint(),
                  "phase": phase, "status": status, "attempt": 1, "started_at": 1.0,
                  "finished_at": 2.0, **fields})

    async def report_all(self, agent: dict[str, str], kubeconfig: str | None = None) -> None:
        """Report every item of the current assignment as applied, as an agent would: with
        the kubeconfig its file holds for an item with kubeconfigFrom."""
        assignment = await self.assignment(agent)
        for item in assignment["items"]:
            await self.report(agent, item, assignment["phase"],
                              kubeconfig=kubeconfig if item.get("kubeconfigFrom") else None)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    store = SQLiteStore(tmp_path / "coordinator.db")
    await store.open()
    clock = Clock()
    coordinator = Coordinator(store, clock)
    secret, _ = await coordinator.access.create_admin_token("tests", "admin")
    client = TestClient(TestServer(create_app(coordinator, tmp_path,
                                              Presentation(advertise_url="http://127.0.0.1:1"))))
    await client.start_server()
    environment = Env(client, coordinator, clock, {"Authorization": f"Bearer {secret}"})
    await environment.call("PUT", "/v1/clusters", 200, data=CLUSTER)
    yield environment
    await client.close()
    await store.close()
