"""Our cordon/drain/uncordon (coordinator/kube.py) against the test Kubernetes API server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from coordinator.domain.durations import utc
from coordinator.domain.model import DrainSettings
from coordinator.domain.nodes.maintenance import KURED_LOCK, MAINTENANCE_ANNOTATION, take
from coordinator.kube import DrainResult, Kube, KubeError
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.workloads import workload


def settings(**changes: object) -> DrainSettings:
    return DrainSettings.model_validate({"evictionRetrySeconds": 0.05, **changes})


async def drain(server: KubeApiServer, tmp_path: Path, node: str, timeout: float = 10,
                force: bool = False, **changes: object) -> DrainResult:
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    async with kube:
        assert await kube.hold(node, utc(time.time())) is None
        return await kube.drain(node, settings(**changes), time.time() + timeout, force=force)


async def test_drain_evicts_controlled_pods_and_keeps_daemonset_and_mirror_pods(
        server: KubeApiServer, tmp_path: Path) -> None:
    result = await drain(server, tmp_path, "w1")
    assert result.drained, result.message
    assert result.evicted == 3
    with server.locked() as cluster:
        left = cluster.pods_on("w1")
        assert [p.split("/")[1].rsplit("-", 1)[0] for p in left] == ["etcd", "node-exporter"]
        assert cluster.cordoned() == ["w1"]
        assert sorted(e.split("/")[1].rsplit("-", 1)[0] for e in cluster.evictions) == [
            "api", "api", "web"]
        # DaemonSet pods, web pods, and the 3 replacements
        assert len(cluster.pods_on("w2") + cluster.pods_on("w3")) == 2 + 2 + 3
        assert cluster.min_healthy["default/web"] >= 2


async def test_a_node_given_back_is_uncordoned_only_where_the_coordinator_cordoned_it(
        server: KubeApiServer, tmp_path: Path) -> None:
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    async with kube:
        assert await kube.hold("w2", "2026-11-28T10:00:00Z") is None
        with server.locked() as cluster:
            cluster.cordon("w3")  # an operator's cordon, before the coordinator came
        assert await kube.hold("w3", "2026-11-28T10:00:00Z") is None
        assert server.cluster.cordoned() == ["w2", "w3"]
        assert (await kube.give_back("w2")).note == "uncordoned node w2"
        assert (await kube.give_back("w3")).note == \
            "left cordoned: node w3 was unschedulable before the drain"
    with server.locked() as cluster:
        assert cluster.cordoned() == ["w3"]
        assert "unschedulable" not in cluster.nodes["w2"]["spec"]
        assert MAINTENANCE_ANNOTATION not in cluster.nodes["w2"]["metadata"]["annotations"]
        assert MAINTENANCE_ANNOTATION not in cluster.nodes["w3"]["metadata"]["annotations"]


async def test_a_node_another_tool_holds_is_neither_cordoned_nor_taken(
        server: KubeApiServer, tmp_path: Path) -> None:
    """kured's lock (its DaemonSet's annotation) and a hold another tool wrote: the
    coordinator names the holder and leaves the Node as it is."""
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    with server.locked() as cluster:
        cluster.add_daemonset("kube-system", "kured", {"name": "kured"})
        cluster.daemonsets[("kube-system", "kured")]["metadata"]["annotations"] = {
            KURED_LOCK: json.dumps({"nodeID": "w2", "created": "2026-11-28T09:00:00Z"})}
        cluster.nodes["w3"]["metadata"].setdefault("annotations", {})[
            MAINTENANCE_ANNOTATION] = json.dumps({"holder": "ops-team", "since": "09:00"})
    async with kube:
        assert await kube.hold("w2", "2026-11-28T10:00:00Z") == \
            f"kured's lock ({KURED_LOCK} on daemonset kube-system/kured)"
        assert await kube.hold("w3", "2026-11-28T10:00:00Z") == "ops-team (since 09:00)"
        assert (await kube.give_back("w3")).patch is None
    with server.locked() as cluster:
        assert cluster.cordoned() == []


async def test_a_hold_that_raced_another_writer_is_taken_on_the_node_as_it_is_now(
        server: KubeApiServer, tmp_path: Path) -> None:
    """The API server refuses a patch computed from an older resourceVersion (409), as it
    would for a tool that took the node meanwhile: the coordinator reads it again."""
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    stale = server.cluster.nodes["w2"]
    async with kube:
        patch = take(stale, "2026-11-28T10:00:00Z")
        with server.locked() as cluster:
            cluster.cordon("w2")  # someone else cordons it between the read and the patch
        refused = await kube._patch_unless_changed("hold node w2", "w2", patch)
        assert refused is False
        assert await kube.hold("w2", "2026-11-28T10:00:00Z") is None
        assert (await kube.give_back("w2")).note == \
            "left cordoned: node w2 was unschedulable before the drain"
    assert server.cluster.cordoned() == ["w2"]


async def test_node_ready_reads_the_condition_the_kubelet_posts(server: KubeApiServer,
                                                               tmp_path: Path) -> None:
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    async with kube:
        assert await kube.node_ready("w1") == (True, "Ready=True (KubeletReady)")
        with server.locked() as cluster:
            cluster.set_node_ready("w1", False, message="PLEG is not healthy")
        assert await kube.node_ready("w1") == (
            False, "Ready=False (KubeletNotReady) (PLEG is not healthy)")
        with pytest.raises(KubeError, match="get node w9: 404"):
            await kube.node_ready("w9")


async def test_a_budget_that_cannot_be_met_blocks_until_the_timeout_naming_pod_and_budget(
        tmp_path: Path) -> None:
    with kube_api_server(workload(ready_delay=3600)) as server:  # replacements never get Ready
        first = await drain(server, tmp_path, "w1", timeout=5)
        assert first.drained  # web 3 -> 2 healthy is allowed
        started = time.monotonic()
        result = await drain(server, tmp_path, "w2", timeout=1.0)
        assert 1.0 <= time.monotonic() - started < 4
        assert not result.drained
        assert result.blocking_budgets == ("default/web",)
        [pod] = result.blocking_pods
        assert pod.startswith("default/web-") and "budget default/web" in result.message
        with server.locked() as cluster:
            assert pod in cluster.pods_on("w2"), "the protected pod was removed"
            assert cluster.cordoned() == ["w1", "w2"]
            assert cluster.min_healthy["default/web"] == 2
            assert cluster.refusals >= 3, "the 429 was not retried"


async def test_a_budget_is_waited_on_until_replacements_are_ready(tmp_path: Path) -> None:
    cluster = Cluster(ready_delay=0.3)
    for node in ("w1", "w2", "w3", "w4"):
        cluster.add_node(node)
    cluster.add_replicaset("default", "db", 3, {"app": "db"}, nodes=["w1"])
    cluster.add_pdb("default", "db", {"app": "db"}, max_unavailable=1)
    with kube_api_server(cluster) as server:
        result = await drain(server, tmp_path, "w1")
        assert result.drained and result.evicted == 3
        with server.locked() as state:
            assert state.min_healthy["default/db"] == 2  # one at a time, never two down
            assert state.refusals > 0


async def test_percentages_follow_the_controllers_scale(tmp_path: Path) -> None:
    cluster = Cluster(ready_delay=3600)
    for node in ("w1", "w2"):
        cluster.add_node(node)
    cluster.add_replicaset("default", "q", 4, {"app": "q"}, nodes=["w1"])
    cluster.add_pdb("default", "q", {"app": "q"}, min_available="50%")
    with kube_api_server(cluster) as server:
        result = await drain(server, tmp_path, "w1", timeout=0.5)
        assert not result.drained and len(result.blocking_pods) == 2
        assert server.cluster.min_healthy["default/q"] == 2


@pytest.mark.parametrize("setting, pod_kind", [("force", "unmanaged"),
                                               ("deleteEmptyDirData", "emptydir")])
async def test_pods_the_settings_do_not_allow_to_move_block_at_once(
        tmp_path: Path, setting: str, pod_kind: str) -> None:
    cluster = Cluster()
    for node in ("w1", "w2"):
        cluster.add_node(node)
    if pod_kind == "unmanaged":
        cluster.add_pod("default", "debug", "w1")
    else:
        cluster.add_replicaset("default", "cache", 1, {"app": "cache"}, nodes=["w1"],
                               empty_dir=True)
    with kube_api_server(cluster) as server:
        blocked = await drain(server, tmp_path, "w1")
        assert not blocked.drained and setting in blocked.message
        assert len(blocked.blocking_pods) == 1 and server.cluster.evictions == []
        allowed = await drain(server, tmp_path, "w1", **{setting: True})
        assert allowed.drained and allowed.evicted == 1


async def test_an_operator_force_deletes_the_pods_a_budget_protects(tmp_path: Path) -> None:
    with kube_api_server(workload(ready_delay=3600)) as server:
        await drain(server, tmp_path, "w1")
        result = await drain(server, tmp_path, "w2", timeout=5, force=True)
        assert result.drained
        assert server.cluster.min_healthy["default/web"] == 1  # the budget was bypassed


async def test_on_timeout_force_deletes_protected_pods_only_once_the_timeout_passed(
        tmp_path: Path) -> None:
    with kube_api_server(workload(ready_delay=3600)) as server:
        await drain(server, tmp_path, "w1")
        started = time.monotonic()
        result = await drain(server, tmp_path, "w2", timeout=0.6, onTimeout="force")
        assert result.drained and time.monotonic() - started >= 0.6


async def test_the_drain_waits_for_evicted_pods_to_terminate_and_honours_the_grace_period(
        tmp_path: Path) -> None:
    with kube_api_server(workload(termination_delay=0.5)) as server:
        started = time.monotonic()
        result = await drain(server, tmp_path, "w1")
        assert result.drained and time.monotonic() - started >= 0.5
        assert len(server.cluster.pods_on("w1")) == 2  # DaemonSet and mirror pod only
        started = time.monotonic()
        assert (await drain(server, tmp_path, "w2", gracePeriodSeconds=0)).drained
        assert time.monotonic() - started < 0.5  # grace 0: the kubelet kills at once


async def test_an_unreachable_api_server_or_bad_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="cannot load the kubeconfig"):
        await Kube.connect(str(tmp_path / "missing"))
    with kube_api_server(workload()) as server:
        path = server.write_kubeconfig(tmp_path / "kubeconfig")
    kube = await Kube.connect(str(path))  # the server is gone now
    async with kube:
        with pytest.raises(KubeError, match="get node w1: the API server does not answer"):
            await kube.hold("w1", "2026-11-28T10:00:00Z")
