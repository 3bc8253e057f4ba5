"""The cluster is ready only once kube-system's Deployments and DaemonSets are available: which
fall short, as the status names them, and the `ready` stage that waits on them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.domain.model import MachineState
from coordinator.domain.nodes.workloads import SystemWorkloads, short_of_available
from coordinator.domain.views.status import History, stages
from tests.support.builders import cluster, machine


def deployment(name: str, replicas: int | None, available: int | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {} if replicas is None else {"replicas": replicas},
            "status": {} if available is None else {"availableReplicas": available}}


def daemonset(name: str, desired: int, available: int | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"desiredNumberScheduled": desired,
                                                   **({} if available is None else
                                                      {"numberAvailable": available})}}


def test_workloads_short_of_available_replicas_are_named_with_their_counts() -> None:
    found = short_of_available(
        [deployment("coredns", 2, 1), deployment("metrics", None, None), deployment("ok", 1, 1)],
        [daemonset("kube-proxy", 4, 4), daemonset("calico-node", 4, 3), daemonset("csi", 2, None)])
    assert found.short == ("deployment coredns 1/2 available", "deployment metrics 0/1 available",
                           "daemonset calico-node 3/4", "daemonset csi 0/2")
    assert found.text() == ("kube-system: deployment coredns 1/2 available, deployment metrics "
                            "0/1 available, daemonset calico-node 3/4, daemonset csi 0/2")
    assert not found.available


def test_all_available_is_available() -> None:
    assert short_of_available([deployment("coredns", 2, 2)], [daemonset("proxy", 3, 3)]).available


def ready_stage(system: SystemWorkloads | None) -> tuple[str, str]:
    fleet = [replace(machine("m1", "manager", state=MachineState.READY), state_since=100.0)]
    found = {s.name: s for s in stages(cluster(), 50.0, fleet, History([]), 200.0, system)}
    return found["ready"].state, found["ready"].message


def test_the_ready_stage_waits_on_kube_system_once_every_machine_is_ready() -> None:
    assert ready_stage(None) == ("done", "1 of 1 Ready")
    assert ready_stage(SystemWorkloads()) == ("done", "1 of 1 Ready")
    assert ready_stage(SystemWorkloads(("deployment coredns 1/2 available",))) == (
        "in-progress", "1 of 1 Ready; kube-system: deployment coredns 1/2 available")
    assert ready_stage(SystemWorkloads(error="list deployments in kube-system: 403 Forbidden")) == (
        "in-progress", "1 of 1 Ready; kube-system not checked: list deployments in kube-system: "
        "403 Forbidden")
