"""Which Node is a machine's (its id label first, its providerID second, never its hostname),
when a machine waits for it in Deploy, and the labels and taints the coordinator puts on it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.domain.model import Machine, MachineState, NodeStatus, kubernetes_access
from coordinator.domain.nodes.nodes import (
    CONTROL_PLANE_TAINT,
    MACHINE_ID_LABEL,
    MANAGED_LABELS,
    MANAGED_TAINTS,
    NodeMetadata,
    Taint,
    awaits_node,
    desired_metadata,
    metadata_due,
    metadata_patch,
    node_due,
    node_of,
    provider_id,
)
from coordinator.domain.rollout.planner import inert_filter, plan
from tests.support.builders import cluster, finish_phase, item, items, machine, moves

PREP, DEP, READY = MachineState.PREPARE, MachineState.DEPLOY, MachineState.READY


def node(name: str, labels: dict[str, str] | None = None, provider: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"providerID": provider} if provider else {}}


def test_the_node_labelled_with_the_machine_id_is_the_machines_whatever_its_name() -> None:
    nodes = [node("w3"), node("w3.example.net", {MACHINE_ID_LABEL: "m-7"})]
    assert node_of(nodes, "lab", "m-7") == "w3.example.net"


def test_a_node_of_the_same_hostname_without_the_mark_is_not_the_machines() -> None:
    assert node_of([node("w3", {MACHINE_ID_LABEL: "m-other"})], "lab", "m-7") is None


def test_the_provider_id_names_the_node_when_no_label_does_and_the_cluster_must_match() -> None:
    nodes = [node("a", provider=provider_id("other", "m-7")), node("b", provider=provider_id("lab", "m-7"))]
    assert provider_id("lab", "m-7") == "nodeagent://lab/m-7"
    assert node_of(nodes, "lab", "m-7") == "b"


# -- Ready means the Node is Ready --------------------------------------------------------------

KUBE = {"kubernetes": {"kubeconfig": "/etc/coordinator/kubeconfig"}}


def found(m: Machine, name: str = "", ready: bool = False) -> Machine:
    return replace(m, node=NodeStatus(1.0, name=name, ready=ready))


def test_a_cluster_has_kubernetes_access_by_a_kubeconfig_file_or_a_manager_item_reporting_one() -> None:
    reporting = item("init", "deploy").model_copy(update={"kubeconfig_from": "/etc/kubernetes/admin.conf"})
    assert kubernetes_access(cluster(**KUBE))
    assert kubernetes_access(cluster(manager=[reporting]))
    assert not kubernetes_access(cluster(manager=items("deploy", 1)))


def test_with_kubernetes_access_a_machine_stays_in_deploy_until_its_node_is_ready() -> None:
    spec = cluster(manager=items("deploy", 1), **KUBE)
    m1 = finish_phase(spec, machine("m1", "manager", state=DEP))
    workers = [machine("w1", state=PREP)]
    assert awaits_node(spec, m1)
    assert plan(spec, [m1, *workers]) == []  # not registered: workers wait too
    assert plan(spec, [found(m1, "m1.lab"), *workers]) == []  # registered, not Ready
    decisions = plan(spec, [found(m1, "m1.lab", ready=True), *workers])
    assert moves(decisions) == [("m1", READY), ("w1", DEP)]
    assert decisions[0].reason == "deploy items applied; node m1.lab Ready"


def test_a_machine_with_deploy_items_left_does_not_wait_for_its_node_yet() -> None:
    spec = cluster(worker=items("deploy", 2), **KUBE)
    assert not awaits_node(spec, machine("w1", state=DEP))


def test_without_kubernetes_access_deploy_items_alone_make_a_machine_ready() -> None:
    spec = cluster(manager=items("deploy", 1))
    m1 = finish_phase(spec, machine("m1", "manager", state=DEP))
    assert not awaits_node(spec, m1)
    assert moves(plan(spec, [m1])) == [("m1", READY)]


def test_the_second_manager_waits_for_the_first_ones_node() -> None:
    spec = cluster(manager=items("deploy", 1), **KUBE)
    m1 = finish_phase(spec, machine("m1", "manager", state=DEP, created_at=1))
    m2 = machine("m2", "manager", state=PREP, created_at=2)
    assert plan(spec, [m1, m2]) == []
    assert moves(plan(spec, [found(m1, "m1", ready=True), m2])) == [("m1", READY), ("m2", DEP)]


# -- labels and taints -----------------------------------------------------------------------------


def test_desired_metadata_role_label_cluster_labels_then_machine_labels() -> None:
    spec = cluster(kubernetes={"labels": {"zone": "eu", "tier": "edge"}})
    worker = replace(machine("w1"), labels={"zone": "eu-1a", "gpu": "yes"})
    assert desired_metadata(spec, worker) == NodeMetadata(
        {"node-role.kubernetes.io/worker": "", "zone": "eu-1a", "tier": "edge", "gpu": "yes"}, ())
    manager = desired_metadata(spec, machine("m1", "manager"))
    assert manager.labels["node-role.kubernetes.io/control-plane"] == ""
    assert manager.taints == ()


def test_dedicated_managers_are_tainted_no_schedule_and_workers_never_are() -> None:
    spec = cluster(kubernetes={"dedicatedManagers": True})
    assert desired_metadata(spec, machine("m1", "manager")).taints == (
        Taint("node-role.kubernetes.io/control-plane", "NoSchedule"),)
    assert desired_metadata(spec, machine("w1")).taints == ()


def registered(labels: dict[str, str], annotations: dict[str, str] | None = None,
               taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels, "annotations": annotations or {}},
            "spec": {"taints": taints} if taints else {}}


def test_the_patch_sets_wanted_labels_and_records_them_as_managed() -> None:
    desired = NodeMetadata({"node-role.kubernetes.io/worker": "", "zone": "a"}, ())
    patch = metadata_patch(registered({"kubernetes.io/hostname": "n"}), desired)
    assert patch == {"metadata": {
        "labels": {"node-role.kubernetes.io/worker": "", "zone": "a"},
        "annotations": {MANAGED_LABELS: "node-role.kubernetes.io/worker,zone", MANAGED_TAINTS: ""}}}


def test_a_label_the_coordinator_put_there_and_no_longer_wants_goes_and_others_stay() -> None:
    node = registered({"zone": "a", "rack": "r1", "team": "db"},
                      {MANAGED_LABELS: "rack,zone", MANAGED_TAINTS: ""})
    patch = metadata_patch(node, NodeMetadata({"zone": "a"}, ()))
    assert patch == {"metadata": {"labels": {"rack": None},
                                  "annotations": {MANAGED_LABELS: "zone"}}}


def test_a_node_as_desired_needs_no_patch() -> None:
    desired = NodeMetadata({"zone": "a"}, (CONTROL_PLANE_TAINT,))
    node = registered({"zone": "a"}, {MANAGED_LABELS: "zone", MANAGED_TAINTS: CONTROL_PLANE_TAINT.ref},
                      [{"key": CONTROL_PLANE_TAINT.key, "effect": "NoSchedule"}])
    assert metadata_patch(node, desired) is None


def test_taints_the_coordinator_manages_come_and_go_and_others_taints_are_kept() -> None:
    theirs = {"key": "example.com/maintenance", "effect": "NoExecute"}
    node = registered({}, {MANAGED_LABELS: "", MANAGED_TAINTS: ""}, [theirs])
    node["metadata"]["resourceVersion"] = "41"
    added = metadata_patch(node, NodeMetadata({}, (CONTROL_PLANE_TAINT,)))
    assert added is not None and added["spec"] == {"taints": [
        theirs, {"key": CONTROL_PLANE_TAINT.key, "effect": "NoSchedule"}]}
    assert added["metadata"]["resourceVersion"] == "41"  # refused if the taints moved since
    tainted = registered({}, {MANAGED_LABELS: "", MANAGED_TAINTS: CONTROL_PLANE_TAINT.ref},
                         [theirs, {"key": CONTROL_PLANE_TAINT.key, "effect": "NoSchedule"}])
    removed = metadata_patch(tainted, NodeMetadata({}, ()))
    assert removed == {"metadata": {"annotations": {MANAGED_TAINTS: ""}},
                       "spec": {"taints": [theirs]}}


def test_a_label_change_makes_the_node_due_and_a_ready_worker_not_inert() -> None:
    spec = cluster(**KUBE)
    worker = machine("w1", state=READY)
    current = found(worker, "w1", ready=True)
    synced = replace(current, node=replace(current.node, metadata=desired_metadata(spec, current).digest()))
    assert not metadata_due(spec, synced) and not node_due(spec, synced)
    relabelled = replace(synced, labels={"zone": "b"})
    assert metadata_due(spec, relabelled) and node_due(spec, relabelled)
    inert = inert_filter(spec, ())
    assert inert(synced) and not inert(relabelled)
    assert not metadata_due(cluster(), relabelled)  # no Kubernetes access: nothing to put on it
