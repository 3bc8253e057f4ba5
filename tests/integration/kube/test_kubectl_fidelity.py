"""The test API server checked against the real, installed kubectl: `kubectl cordon` and
`kubectl drain` work on it, and do what our drain does: the same pods evicted, DaemonSet and
mirror pods kept, the same pods refused without --force / --delete-emptydir-data, and a drain
blocked by a PodDisruptionBudget stays blocked."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from coordinator.domain.durations import utc
from coordinator.domain.model import DrainSettings
from coordinator.kube import Kube
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.requirements import require_binary
from tests.support.workloads import workload


def kubectl(server: KubeApiServer, tmp_path: Path, *args: str,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    config = server.write_kubeconfig(tmp_path / "kubectl.kubeconfig")
    return subprocess.run([require_binary("kubectl"), "--kubeconfig", str(config), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


async def ours(server: KubeApiServer, tmp_path: Path, node: str, timeout: float = 10,
               **changes: object) -> bool:
    kube = await Kube.connect(str(server.write_kubeconfig(tmp_path / "ours.kubeconfig")))
    settings = DrainSettings.model_validate({"evictionRetrySeconds": 0.2, **changes})
    async with kube:  # as the drainer does: held and cordoned, then drained
        assert await kube.hold(node, utc(time.time())) is None
        return (await kube.drain(node, settings, time.time() + timeout)).drained


def outcome(server: KubeApiServer, node: str) -> tuple[list[str], list[str], list[str]]:
    """Evicted pods and the node's pods by owner (a replacement's name depends on the order the
    evictions came in, which differs between the two), and the cordoned nodes."""
    def owners(pods: list[str]) -> list[str]:
        return sorted(p.rsplit("-", 1)[0] for p in pods)

    with server.locked() as cluster:
        return owners(cluster.evictions), owners(cluster.pods_on(node)), cluster.cordoned()


def with_unmanaged_and_emptydir() -> Cluster:
    cluster = workload()
    cluster.add_pod("default", "debug", "w1")
    cluster.add_replicaset("default", "cache", 1, {"app": "cache"}, nodes=["w1"], empty_dir=True)
    return cluster


def test_kubectl_cordon_and_uncordon_patch_the_node_as_ours_does(server: KubeApiServer,
                                                                 tmp_path: Path) -> None:
    result = kubectl(server, tmp_path, "cordon", "w2")
    assert result.returncode == 0 and "node/w2 cordoned" in result.stdout, result.stderr
    assert server.cluster.cordoned() == ["w2"]
    assert kubectl(server, tmp_path, "uncordon", "w2").returncode == 0
    assert server.cluster.cordoned() == []
    assert "unschedulable" not in server.cluster.nodes["w2"]["spec"]


async def test_kubectl_drain_evicts_the_same_pods_as_ours(tmp_path: Path) -> None:
    with kube_api_server(workload()) as theirs_server, kube_api_server(workload()) as ours_server:
        result = kubectl(theirs_server, tmp_path, "drain", "w1", "--ignore-daemonsets",
                         "--timeout=30s")
        assert result.returncode == 0, result.stderr
        assert "ignoring DaemonSet-managed Pods: kube-system/node-exporter-" in result.stderr
        assert await ours(ours_server, tmp_path, "w1")
        theirs = outcome(theirs_server, "w1")
        assert theirs == outcome(ours_server, "w1")
        evicted, left, cordoned = theirs
        assert len(evicted) == 3 and cordoned == ["w1"]
        assert left == ["kube-system/etcd", "kube-system/node-exporter"]


async def test_both_refuse_unmanaged_and_emptydir_pods_unless_told(tmp_path: Path) -> None:
    with kube_api_server(with_unmanaged_and_emptydir()) as theirs_server, \
            kube_api_server(with_unmanaged_and_emptydir()) as ours_server:
        refused = kubectl(theirs_server, tmp_path, "drain", "w1", "--ignore-daemonsets",
                          "--timeout=10s")
        assert refused.returncode != 0
        assert "default/debug" in refused.stderr and "default/cache-" in refused.stderr
        assert not await ours(ours_server, tmp_path, "w1")
        assert theirs_server.cluster.evictions == ours_server.cluster.evictions == []

        allowed = kubectl(theirs_server, tmp_path, "drain", "w1", "--ignore-daemonsets",
                          "--force", "--delete-emptydir-data", "--timeout=30s")
        assert allowed.returncode == 0, allowed.stderr
        assert await ours(ours_server, tmp_path, "w1", force=True, deleteEmptyDirData=True)
        assert outcome(theirs_server, "w1") == outcome(ours_server, "w1")
        assert "default/debug" in outcome(theirs_server, "w1")[0]


async def test_a_drain_blocked_by_a_budget_stays_blocked_for_both(tmp_path: Path) -> None:
    with kube_api_server(workload(ready_delay=3600)) as theirs_server, \
            kube_api_server(workload(ready_delay=3600)) as ours_server:
        for server in (theirs_server, ours_server):  # web: 3 -> 2 healthy, at the budget
            assert kubectl(server, tmp_path, "drain", "w1", "--ignore-daemonsets",
                           "--timeout=30s").returncode == 0
        blocked = kubectl(theirs_server, tmp_path, "drain", "w2", "--ignore-daemonsets",
                          "--timeout=6s")
        assert blocked.returncode != 0
        assert "disruption budget" in blocked.stderr, blocked.stderr
        assert not await ours(ours_server, tmp_path, "w2", timeout=2)
        theirs, mine = outcome(theirs_server, "w2"), outcome(ours_server, "w2")
        assert theirs == mine
        assert "default/web" in theirs[1], "the protected pod went"
        for server in (theirs_server, ours_server):
            assert server.cluster.min_healthy["default/web"] == 2
            assert server.cluster.refusals > 0
