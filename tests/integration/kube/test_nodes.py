"""Finding a machine's Node (coordinator/kube.py, domain/nodes/nodes.py) in the test Kubernetes API
server, after a kubelet-like registration through the API."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL, provider_id
from coordinator.kube import Kube
from tests.support.kubeapi import KubeApiServer, kube_api_server


async def register(server: KubeApiServer, name: str, labels: dict[str, str],
                   provider: str | None = None) -> int:
    """POST the node as a kubelet does (the test server takes no credentials)."""
    body = {"metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider} if provider else {}}
    async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/api/v1/nodes", json=body) as response:
        return response.status


async def test_a_machine_s_node_is_found_by_its_mark_and_not_by_its_hostname(tmp_path: Path) -> None:
    with kube_api_server() as server:
        assert await register(server, "w1", {}) == 201  # a node of the machine's hostname
        assert await register(server, "w1.lab.example", {MACHINE_ID_LABEL: "id-1"}) == 201
        assert await register(server, "node-b", {}, provider_id("lab", "id-2")) == 201
        assert await register(server, "node-b", {}) == 409
        async with await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig"))) as kube:
            assert await kube.find_node("lab", "id-1") == "w1.lab.example"
            assert await kube.find_node("lab", "id-2") == "node-b"
            assert await kube.find_node("other", "id-2") is None
            assert await kube.find_node("lab", "id-3") is None


async def test_a_deleted_node_goes_with_its_pods_and_deleting_it_again_is_no_error(
        tmp_path: Path) -> None:
    with kube_api_server() as server:
        with server.locked() as cluster:
            cluster.add_node("w1.lab.example", {MACHINE_ID_LABEL: "id-1"})
            cluster.add_node("w2")
            cluster.add_pod("default", "solo", "w1.lab.example")
        async with await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig"))) as kube:
            await kube.delete_node("w1.lab.example")
            await kube.delete_node("w1.lab.example")  # a retry after a lost answer
            assert await kube.find_node("lab", "id-1") is None
        assert server.cluster.deleted_nodes == ["w1.lab.example"]
        assert sorted(server.cluster.nodes) == ["w2"]
        assert server.cluster.pods_on("w1.lab.example") == []
