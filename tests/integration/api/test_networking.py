"""The cluster's networking settings through the API: free to change while no manager has
deployed, then fixed: `cluster apply` (and the dry run of an upgrade) refuses a change naming
each field, with 409 and nothing stored, and still takes any other change."""

from __future__ import annotations

from tests.support.builders import API_CLUSTER
from tests.support.harness import InProcessCoordinator

CLUSTER = API_CLUSTER.replace(
    "settings: {", "settings: {kubernetes: {podSubnet: 10.50.0.0/16, cni: calico, "
    "controlPlaneEndpoint: 'k8s.lab:6443', labels: {env: prod}}, ").replace(
    '    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}\n'
    '    - {name: control-plane', '    - {name: control-plane')  # managers prepare nothing


async def deploy_first_manager(env: InProcessCoordinator) -> None:
    """m1 approved as a manager, which has nothing to prepare: admitted into Deploy."""
    await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("m1"))["state"] == "Deploy"


async def test_networking_is_fixed_once_the_first_manager_deployed(
        env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=CLUSTER)
    moved = CLUSTER.replace("podSubnet: 10.50.0.0/16", "podSubnet: 10.70.0.0/16")
    await env.call("PUT", "/v1/clusters", 200, data=moved)  # no manager deployed yet
    await deploy_first_manager(env)
    before = await env.call("GET", "/v1/clusters/lab", 200)

    refused = await env.call("PUT", "/v1/clusters", 409, data=CLUSTER.replace("cni: calico",
                                                                              "cni: cilium"))
    assert refused["error"] == (
        "cluster lab not applied: settings.kubernetes.podSubnet cannot change from "
        "10.70.0.0/16 to 10.50.0.0/16: the cluster's networking is fixed once the first manager "
        "deployed (m1 is Deploy); keep the value, or create a new cluster for the new one; "
        "settings.kubernetes.cni cannot change from calico to cilium: the cluster's networking "
        "is fixed once the first manager deployed (m1 is Deploy); keep the value, or create a "
        "new cluster for the new one")
    dry_run = await env.call("POST", "/v1/clusters/lab/upgrade-plan", 409, data=CLUSTER)
    assert dry_run["error"].startswith("cluster lab not applied: settings.kubernetes.podSubnet")
    assert await env.call("GET", "/v1/clusters/lab", 200) == before  # nothing stored

    relabelled = moved.replace("labels: {env: prod}", "labels: {env: staging}, version: 1.31.2")
    applied = await env.call("PUT", "/v1/clusters", 200, data=relabelled)
    assert applied["spec"]["settings"]["kubernetes"]["labels"] == {"env": "staging"}
