"""The Kubernetes version rules at `cluster apply` and `upgrade plan`, through the API and the
CLI of a real coordinator on SQLite, with a cluster Ready on the test Kubernetes API server: a
skipped minor, a downgrade and a version change without a new release are refused 422 naming
settings.kubernetes.version and the allowed versions, before anything is stored or drained
(every machine stays Ready, no node cordoned, no drain recorded); a forced downgrade is
accepted and recorded in an event (domain/releases/versions.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.api.operator import machine
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server

SPEC = """\
name: lab
release: "{release}"
settings:
  kubernetes: {{version: "{version}", kubeconfig: {kubeconfig}}}
machineTypes:
  manager:
    - &packages {{name: packages, phase: prepare, version: "{version}",
                 action: {{type: exec, argv: [sh, packages.sh, "${{kubernetes.{told}}}"]}}}}
    - {{name: control-plane, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
    - &upgrade {{name: upgrade, phase: upgrade, version: "{version}", action: {{type: exec, argv: ["true"]}}}}
  worker:
    - *packages
    - {{name: join, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
    - *upgrade
"""


def spec(kubeconfig: Path, version: str, release: str | None = None, told: str = "version") -> str:
    """The cluster at version; told: the setting its package item is given."""
    return SPEC.format(version=version, release=release or version, kubeconfig=kubeconfig,
                       told=told)


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    cluster = Cluster()
    for node in ("m1", "w1"):
        cluster.add_node(node)
    with kube_api_server(cluster) as server:
        yield server


@pytest.fixture
async def env(tmp_path: Path, kube: KubeApiServer) -> AsyncIterator[InProcessCoordinator]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    async with in_process_coordinator(tmp_path, spec(kubeconfig, "1.33.4")) as running:
        agents = {}
        for hostname, role in (("m1", "manager"), ("w1", "worker")):
            agents[hostname] = await running.register(hostname)
            with kube.locked() as nodes:
                nodes.mark_node(hostname, agents[hostname]["machine_id"])
            await running.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})

        async def rolled_out() -> bool:
            for agent in agents.values():
                await running.report_all(agent)
            status = await running.call("GET", "/v1/clusters/lab/status", 200)
            return status["counts"] == {"Ready": 2}

        await running.until("the rollout", rolled_out)
        yield running


async def untouched(env: InProcessCoordinator, kube: KubeApiServer) -> None:
    """Nothing was stored or started: the stored spec at 1.33.4, every machine Ready at it
    after a reconcile pass, no node cordoned and no drain recorded."""
    await env.coordinator.reconciler.reconcile_once()
    stored = await env.call("GET", "/v1/clusters/lab", 200)
    assert (stored["release"], stored["spec"]["settings"]["kubernetes"]["version"]) == (
        "1.33.4", "1.33.4")
    for hostname in ("m1", "w1"):
        found = await machine(env, hostname)
        assert (found["state"], found["kubernetes"]) == ("Ready", "1.33.4"), found
    with kube.locked() as cluster:
        assert cluster.cordoned() == []
    assert await env.call("GET", "/v1/events?cluster=lab&kind=drain", 200) == []


@pytest.mark.parametrize(("version", "release", "said"), [
    ("1.35.0", None, "1.35.0 skips a minor: the cluster runs 1.33.4 (the stored spec, m1, w1)"),
    ("1.33.2", None, "1.33.2 is a downgrade: the cluster runs 1.33.4"),
    ("1.34.1", "1.33.4", "changed from 1.33.4 to 1.34.1 with release still '1.33.4'"),
])
async def test_a_version_the_rules_refuse_is_refused_before_anything_is_drained(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path, version: str,
        release: str | None, said: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    new = tmp_path / "new.yaml"
    new.write_text(spec(kubeconfig, version, release))
    for method, path in (("PUT", "/v1/clusters"), ("POST", "/v1/clusters/lab/upgrade-plan")):
        refused = await env.call(method, path, 422, data=new.read_text())
        assert [p["path"] for p in refused["problems"]] == ["settings.kubernetes.version"]
        assert said in refused["problems"][0]["message"]
    for command in (["cluster", "apply", "-f", str(new)], ["upgrade", "plan", "lab", "-f", str(new)]):
        output = await env.cli(*command, exit_code=2)  # bad input, as every 422
        assert "settings.kubernetes.version: " + said in output
        if release is None:
            assert "allowed: 1.33.x from 1.33.4, or 1.34.x" in output
    await untouched(env, kube)


async def test_a_forced_downgrade_is_accepted_and_recorded(
        env: InProcessCoordinator, kube: KubeApiServer, tmp_path: Path) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(spec(tmp_path / "kubeconfig", "1.33.2", told="allowDowngrade"))
    plan = await env.cli("upgrade", "plan", "lab", "-f", str(new), "--allow-downgrade")
    assert "step 1: m1 (manager, from 1.33.4) runs prepare/packages, upgrade/upgrade" in plan
    await untouched(env, kube)  # a dry run

    applied = await env.cli_result("cluster", "apply", "-f", str(new), "--allow-downgrade")
    stored = await env.call("GET", "/v1/clusters/lab", 200)
    assert stored["spec"]["settings"]["kubernetes"]["version"] == "1.33.2"
    assert stored["spec"]["settings"]["kubernetes"]["allowDowngrade"] is True
    (recorded,) = await env.call("GET", "/v1/events?cluster=lab&kind=downgrade", 200)
    assert recorded["message"].startswith("Kubernetes 1.33.4 -> 1.33.2 at release 1.33.2: a "
                                          "downgrade, forced (--allow-downgrade)")
    # the dry run warned of it before, and the apply as it happened, in the event's words
    assert f"warning: {recorded['message']}" in plan.splitlines()
    assert applied.stderr.splitlines() == [f"warning: {recorded['message']}"]
    # the package items are told they may go down, while this version stays
    rendered = await env.cli("cluster", "render", "lab", "--machine", "m1", "--phase", "prepare")
    assert "sh packages.sh true" in rendered, rendered
