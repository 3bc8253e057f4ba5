"""A coordinator started again after a while (an upgrade, a crash, a failover) heard no
heartbeat meanwhile: it must give the agents one heartbeat timeout to reach it before it
declares anyone not responding, not mark the whole fleet silent at its first pass."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.harness import ManualClock, in_process_coordinator

TIMEOUT = 30  # API_CLUSTER's heartbeatTimeoutSeconds


async def test_after_a_restart_no_machine_is_declared_silent_before_one_timeout(
        tmp_path: Path) -> None:
    clock = ManualClock()
    async with in_process_coordinator(tmp_path, clock=clock) as before:
        agents = [await before.register(f"m{i}") for i in range(3)]
        await before.coordinator.reconciler.reconcile_once()
    clock.now += 3_600  # down for an hour: every machine was last seen long ago
    async with in_process_coordinator(tmp_path, clock=clock) as env, env.background(tick=0.05):
        await asyncio.sleep(0.5)  # many passes of the reconcile loop, the clock still
        clock.now += TIMEOUT - 1
        await asyncio.sleep(0.5)
        machines = await env.machines()
        assert [m["responding"] for m in machines] == [True] * 3
        kinds = [e["kind"] for e in await env.call("GET", "/v1/events?cluster=lab", 200)]
        assert "not-responding" not in kinds

        await env.heartbeat(agents[0])  # this one's agent reached the coordinator meanwhile
        clock.now += 2  # a whole timeout since the start: the others are silent indeed

        async def judged() -> bool:
            states = {m["hostname"]: m["responding"]
                      for m in await env.machines()}
            return states == {"m0": True, "m1": False, "m2": False}

        await env.until("the silent machines declared", judged)
        events = await env.call("GET", "/v1/events?cluster=lab", 200)
        assert sorted(e["message"] for e in events if e["kind"] == "not-responding") == [
            f"m{i} missed heartbeats for {3_600 + TIMEOUT + 1}s" for i in (1, 2)]
