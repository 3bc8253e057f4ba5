"""The workload-recovery gate between upgrade steps (domain/nodes/recovery.py, and its steps in
draining.py and the planner): an upgraded node's machine leaves Upgrade, and the next drain
may start, only once what its drain evicted is available again, or the timeout passed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.domain.model import DrainStage, DrainStatus, MachineState, node_upgraded
from coordinator.domain.nodes.drain import PodRef
from coordinator.domain.nodes.draining import node_ready, recovered, recovering
from coordinator.domain.nodes.recovery import evicted_workloads, not_back
from coordinator.domain.rollout.planner import node_action
from tests.support.builders import KUBE_ACCESS, cluster, finish_phase, machine, upgraded_cluster

WEB = "ReplicaSet default/web-7f9c"


def pod(name: str, kind: str = "ReplicaSet", owner: str = "web-7f9c",
        phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": name,
                         "ownerReferences": [{"kind": kind, "name": owner, "uid": owner,
                                              "controller": True}]},
            "status": {"phase": phase}}


def test_a_drain_waits_afterwards_for_the_replicasets_of_the_running_pods_it_evicted() -> None:
    pods = [pod("web-1"), pod("web-2"), pod("job-1", "Job", "nightly", "Succeeded"),
            pod("db-0", "StatefulSet", "db"), pod("api-1", owner="api-5d2e")]
    evicted = [PodRef("default", n, n) for n in ("web-1", "web-2", "job-1", "db-0")]
    assert evicted_workloads(pods, evicted) == (WEB,)  # api-1 stayed; a Job's and a
    # StatefulSet's pods are not waited for


def replicaset(ready: int, wanted: int = 2) -> dict[str, Any]:
    return {"spec": {"replicas": wanted, "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"readyReplicas": ready}}


def budget(namespace: str, healthy: int, desired: int) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"currentHealthy": healthy, "desiredHealthy": desired}}


def test_what_is_not_back_names_the_replicas_and_the_budgets_short() -> None:
    assert not_back({WEB: replicaset(1)}, [budget("default", 1, 2), budget("prod", 0, 2)]) == [
        f"{WEB}: 1 of 2 ready", "budget default/web: 1 of the 2 healthy pods it wants"]
    assert not_back({WEB: replicaset(2)}, [budget("default", 2, 2)]) == []
    assert not_back({WEB: None}, []) == []  # deleted since: nothing to wait for


SPEC = upgraded_cluster(cluster(**KUBE_ACCESS))
READY_AGAIN = DrainStatus(DrainStage.NODE_READY, 1.0, workloads=(WEB,), ready_at=100.0)


def upgrading(drain: DrainStatus) -> Any:
    return finish_phase(SPEC, replace(machine("w1", state=MachineState.UPGRADE), drain=drain))


def test_a_node_ready_again_waits_for_its_workloads_unless_the_gate_is_off() -> None:
    assert node_action(SPEC, upgrading(READY_AGAIN)) == "await-recovery"
    assert not node_upgraded(SPEC, READY_AGAIN)
    nothing_evicted = replace(READY_AGAIN, workloads=())
    assert node_action(SPEC, upgrading(nothing_evicted)) is None
    assert node_upgraded(SPEC, nothing_evicted)
    off = SPEC.model_copy(update={"settings": SPEC.settings.model_copy(update={
        "drain": SPEC.settings.drain.model_copy(update={"recovery_timeout_seconds": 0})})})
    assert node_action(off, upgrading(READY_AGAIN)) is None and node_upgraded(off, READY_AGAIN)
    done = replace(READY_AGAIN, stage=DrainStage.RECOVERED)
    assert node_action(SPEC, upgrading(done)) is None and node_upgraded(SPEC, done)


def test_the_gate_says_what_is_not_back_and_how_it_ended() -> None:
    uncordoned = DrainStatus(DrainStage.UNCORDONED, 1.0, workloads=(WEB,), uncordoned_at=50.0)
    ready, said = node_ready("w1", uncordoned, "w1", 100.0)
    assert (ready.stage, ready.ready_at, said) == (DrainStage.NODE_READY, 100.0, "w1: node w1 Ready")
    waiting = recovering(ready, [f"{WEB}: 1 of 2 ready"])
    assert waiting.message == ("upgrade items applied; node Ready; waiting for the workloads its "
                               f"drain evicted: {WEB}: 1 of 2 ready")
    assert recovering(waiting, [f"{WEB}: 1 of 2 ready"]) == waiting  # nothing new to write
    back, said = recovered("w1", waiting, [], 300)
    assert back.stage is DrainStage.RECOVERED
    assert said == "w1: the workloads its drain evicted are available again (1)"
    late, said = recovered("w1", waiting, [f"{WEB}: 1 of 2 ready"], 300)
    assert late.stage is DrainStage.RECOVERED
    assert said == ("w1: workloads not available 300s after the node was Ready, going on: "
                    f"{WEB}: 1 of 2 ready")
