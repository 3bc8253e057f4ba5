"""Workloads for the test Kubernetes API server (tests/support/kubeapi.py), shared by the drain
tests and bench/drain.py."""

from __future__ import annotations

from tests.support.kubeapi import Cluster


def workload(termination_delay: float = 0.0, ready_delay: float = 0.0) -> Cluster:
    """w1..w3; a DaemonSet everywhere; ReplicaSet web (3 pods, one per node) under a budget of
    minAvailable 2; ReplicaSet api (2 pods on w1); a mirror pod on w1."""
    cluster = Cluster(termination_delay=termination_delay, ready_delay=ready_delay)
    for node in ("w1", "w2", "w3"):
        cluster.add_node(node)
    cluster.add_daemonset("kube-system", "node-exporter", {"app": "node-exporter"})
    cluster.add_replicaset("default", "web", 3, {"app": "web"})
    cluster.add_replicaset("default", "api", 2, {"app": "api"}, nodes=["w1"])
    cluster.add_pod("kube-system", "etcd-w1", "w1", {"component": "etcd"}, mirror=True)
    cluster.add_pdb("default", "web", {"app": "web"}, min_available=2)
    return cluster


def crowded_node(pods: int, termination_delay: float) -> Cluster:
    """w1..w3, a DaemonSet everywhere, and `pods` ReplicaSet pods (sets of 20) all on w1, no
    budget: a drain of w1 that nothing blocks."""
    cluster = Cluster(termination_delay=termination_delay)
    for node in ("w1", "w2", "w3"):
        cluster.add_node(node)
    cluster.add_daemonset("kube-system", "node-exporter", {"app": "node-exporter"})
    for index in range(pods // 20):
        cluster.add_replicaset("default", f"app{index}", 20, {"app": f"app{index}"}, nodes=["w1"])
    return cluster
