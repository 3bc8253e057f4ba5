"""The outputs a cluster keeps, through the API over a real SQLite store: what the first manager
produced reaches a worker that joins after that manager was deleted (before, the worker waited
for ever), and a value another manager produces differently never replaces it: an event and
that manager's note say so, without the values."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.driver import Registered
from tests.support.harness import InProcessCoordinator, in_process_coordinator

SPEC = """\
name: lab
release: "1"
machineTypes:
  manager:
    - name: init
      phase: deploy
      when: {firstManager: true}
      outputs: [{name: endpoint, secret: false}]
      action: {type: exec, argv: [init]}
    - name: control-plane
      phase: deploy
      outputs: [{name: caCertHash}]
      action: {type: exec, argv: [ca]}
    - {name: reset, phase: reset, action: {type: exec, argv: [reset]}}
  worker:
    - name: join
      phase: deploy
      action: {type: exec, argv: [join, "${outputs.init.endpoint}", "${outputs.control-plane.caCertHash}"]}
"""
PRODUCED = {"m1": {"endpoint": "10.0.0.1:6443", "caCertHash": "sha256:first-ca"},
            "m2": {"caCertHash": "sha256:another-ca"}, "m3": {"caCertHash": "sha256:first-ca"}}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[InProcessCoordinator]:
    async with in_process_coordinator(tmp_path, SPEC) as running:
        yield running


async def deployed(env: InProcessCoordinator, hostname: str) -> Registered:
    """A manager approved and its deploy items reported, each with the outputs it declares
    (PRODUCED[hostname]), until it is Ready."""
    agent = await env.register(hostname)
    await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": "manager"})

    async def ready() -> bool:
        current = await env.assignment(agent)
        for item in current["items"]:
            outputs = {o["name"]: PRODUCED[hostname][o["name"]] for o in item.get("outputs", [])}
            await env.report(agent, item, item["phase"], outputs=outputs or None)
        return bool((await env.call("GET", f"/v1/machines/{hostname}", 200))["state"] == "Ready")

    await env.until(f"{hostname} Ready", ready)
    return agent


async def test_the_first_managers_outputs_reach_a_joiner_after_it_was_deleted(
        env: InProcessCoordinator) -> None:
    m1 = await deployed(env, "m1")
    await deployed(env, "m2")
    await deployed(env, "m3")  # two of three stay: a majority
    events = await env.call("GET", "/v1/events?cluster=lab", 200)
    differs = [e for e in events if e["kind"] == "output-differs"]
    assert [(e["hostname"], e["data"]["outputs"]) for e in differs] == [
        ("m2", ["outputs.control-plane.caCertHash"])]
    assert {e["data"]["output"]: e["data"]["machine"] for e in events
            if e["kind"] == "output-kept"} == {"init.endpoint": m1["machine_id"],
                                               "control-plane.caCertHash": m1["machine_id"]}
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    note = next(m["note"]["text"] for m in status["machines"] if m["hostname"] == "m2")
    assert "${outputs.control-plane.caCertHash} differs from the cluster's (first produced by " \
           "m1), which is kept" in note

    await env.call("DELETE", "/v1/machines/m1", 202)
    await env.report_all(m1)
    await env.until("m1 removed", lambda: _gone(env, "m1"))
    w1 = await env.register("w1")
    await env.call("POST", "/v1/machines/w1/approve", 200, json={"role": "worker"})
    await env.until("w1 deploying", lambda: _state(env, "w1", "Deploy"))
    join = await env.assignment(w1)
    assert [i["name"] for i in join["items"]] == ["join"]
    assert join["values"]["outputs.init.endpoint"] == "10.0.0.1:6443"
    assert join["values"]["outputs.control-plane.caCertHash"] == "sha256:first-ca"
    status = await env.call("GET", "/v1/clusters/lab/status", 200)
    assert status["outputs"] == {"outputs.init.endpoint": "10.0.0.1:6443"}  # the public one
    shown = json.dumps([status, await env.call("GET", "/v1/events?cluster=lab", 200)])
    assert "first-ca" not in shown and "another-ca" not in shown


async def _gone(env: InProcessCoordinator, hostname: str) -> bool:
    return hostname not in {m["hostname"] for m in await env.machines()}


async def _state(env: InProcessCoordinator, hostname: str, state: str) -> bool:
    return any(m["hostname"] == hostname and m["state"] == state for m in await env.machines())
