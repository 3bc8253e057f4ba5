"""What the status and every machine view say while a machine waits or is stuck: a worker
prepared before any manager runs the control plane, a machine deleted while its agent is
silent; each names what it waits for, for how long, and what to do (the paused upgrade and
the drain with no kubeconfig: test_upgrade_api.py)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.api.operator import machine, shown_everywhere
from tests.support.builders import API_CLUSTER
from tests.support.harness import InProcessCoordinator


async def stage(env: InProcessCoordinator, name: str) -> tuple[str, str]:
    found = (await env.call("GET", "/v1/clusters/lab/status", 200))["stages"]
    return next((s["state"], s["message"]) for s in found if s["name"] == name)


async def test_a_prepared_worker_waits_for_the_first_manager_and_says_so(
        env: InProcessCoordinator) -> None:
    w1 = await env.register("w1")
    await env.cli("approve", "w1", "--role", "worker")
    await env.coordinator.reconciler.reconcile_once()
    await env.report_all(w1)
    env.clock.now += 100
    await env.heartbeat(w1)
    await shown_everywhere(env, "w1", "prepared; waiting for the first manager to be Ready "
                           "(1m40s): the cluster has no manager",
                           "approve a machine as a manager: coordinator approve HOSTNAME --role "
                           "manager")
    await env.register("m1")
    await env.cli("approve", "m1", "--role", "manager")
    await env.coordinator.reconciler.reconcile_once()
    assert await stage(env, "workers") == (
        "waiting", "0 of 1 workers deployed; waiting for the first manager to be Ready: w1")
    await shown_everywhere(env, "w1", "prepared; waiting for the first manager to be Ready "
                           "(1m40s): m1 is in Prepare", "nothing while m1 gets there; if it is "
                           "stuck, its note says why: coordinator machines get m1")


async def test_a_machine_deleted_while_its_agent_is_silent_says_how_to_remove_it(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    resets = tmp_path / "lab.yaml"
    resets.write_text(API_CLUSTER + '    - {name: wipe, phase: reset, action: {type: exec, '
                      'argv: ["true"]}}\n')
    await env.cli("cluster", "apply", "-f", str(resets))
    agents = {h: await env.register(h) for h in ("m1", "w1")}
    for hostname, role in (("m1", "manager"), ("w1", "worker")):
        await env.cli("approve", hostname, "--role", role)

    async def ready() -> bool:
        for agent in agents.values():
            await env.report_all(agent)
        return all([(await machine(env, h))["state"] == "Ready" for h in agents])

    await env.until("the rollout", ready)
    env.clock.now += 120  # w1's agent falls silent
    await env.heartbeat(agents["m1"])
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.cli("delete", "w1")) == "w1: resetting\n"
    await env.coordinator.reconciler.reconcile_once()
    await shown_everywhere(env, "w1", "NOT RESPONDING for 2m00s: its reset items wait for its "
                           "agent", "start the agent on w1 (systemctl status nodeagent; "
                           "journalctl -u nodeagent); or, if w1 is gone, remove it without its "
                           "reset items: coordinator delete w1 --skip-reset (and reset w1 "
                           "yourself)")
    assert (await env.cli("delete", "w1", "--skip-reset")) == "w1: removed\n"


async def test_a_revoked_machine_says_its_agent_is_refused_and_how_it_rejoins(
        env: InProcessCoordinator) -> None:
    await env.register("w1")
    await env.cli("revoke", "w1")
    rejoin = ("on w1, set join: in the agent's config to the string it printed, remove "
              "identity.json from the agent's state dir and restart the agent; or take the "
              "machine out: coordinator delete w1")
    await shown_everywhere(env, "w1", "credential revoked: its agent is refused until it "
                           "rejoins as this machine", f"coordinator machines reissue w1, then {rejoin}")
    await env.cli("machines", "reissue", "w1", "--ttl", "1h")
    await shown_everywhere(env, "w1", "credential revoked; the join string `coordinator machines "
                           "reissue w1` printed waits to be used (expires in 1h", rejoin)
