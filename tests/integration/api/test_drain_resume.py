"""A coordinator killed (SIGKILL) in the middle of a drain, and started again on the same store:
the new process resumes the drain where the old one stopped. The node stays cordoned
throughout, the remaining pods are evicted, the budget is never violated, and the drain keeps
its attempt and its deadline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.builders import DRAINING_CLUSTER as SPEC
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server, rolled_out_marked
from tests.support.waiting import wait_until

READY_DELAY = 2.0  # a replacement's time to Ready: the budget lets one web pod go per period


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """m1 and w1; ReplicaSet web with its 4 pods on w1 under a budget of minAvailable 3, so a
    drain of w1 evicts them one at a time, each once the previous one's replacement is Ready."""
    cluster = Cluster(ready_delay=READY_DELAY)
    for node in ("m1", "w1"):
        cluster.add_node(node)
    cluster.add_daemonset("kube-system", "proxy", {"app": "proxy"})
    cluster.add_replicaset("default", "web", 4, {"app": "web"}, nodes=["w1"])
    cluster.add_pdb("default", "web", {"app": "web"}, min_available=3)
    with kube_api_server(cluster) as server:
        yield server


def web_on_w1(kube: KubeApiServer) -> list[str]:
    return [p for p in kube.cluster.pods_on("w1") if p.startswith("default/web-")]


def w1_drain(c: ServedCoordinator) -> dict[str, Any]:
    drain: dict[str, Any] = c.machine("w1")["drain"] or {}
    return drain


def test_a_coordinator_killed_mid_drain_resumes_it_after_a_restart(
        tmp_path: Path, kube: KubeApiServer) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    with running_coordinator(tmp_path, SPEC.format(release="1.0", kubeconfig=kubeconfig)) as c:
        rolled_out_marked(c, kube, {"m1": "manager", "w1": "worker"})
        c.admin.request("PUT", "/v1/clusters", text=SPEC.format(release="2.0", kubeconfig=kubeconfig),
                        content_type="application/yaml")
        wait_until(lambda: len(kube.cluster.evictions) == 1, 30, "w1's first eviction")
        before = w1_drain(c)
        assert before["stage"] == "Draining" and len(web_on_w1(kube)) == 3, before

        c.stop(crash=True)
        assert kube.cluster.cordoned() == ["w1"], "the crash uncordoned the node"
        c.start()
        wait_until(lambda: w1_drain(c).get("stage") == "Drained", 60, "the resumed drain")

        after = w1_drain(c)
        assert (after["attempt"], after["started_at"]) == (before["attempt"], before["started_at"]), \
            "the restart started a new drain attempt (and a new timeout)"
        with kube.locked() as cluster:
            assert web_on_w1(kube) == []
            assert [e.split("-")[0] for e in cluster.evictions] == ["default/web"] * 4
            assert cluster.min_healthy["default/web"] >= 3, "the budget was violated"
            assert cluster.uncordons == [], "the node was uncordoned before its upgrade"
        resumed = [e["message"] for e in c.admin.get("/v1/events?kind=drain") if e["hostname"] == "w1"]
        assert any(m.startswith("w1: draining (attempt 1; ") for m in resumed), resumed

        c.report_all(c.agents["w1"])
        wait_until(lambda: c.machine("w1")["state"] == "Ready" and c.machine("w1")["release"] == "2.0",
                   30, "w1 upgraded")
        assert kube.cluster.cordoned() == [] and kube.cluster.uncordons == ["w1"]
