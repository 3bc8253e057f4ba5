"""The workload-recovery gate between upgrade steps: which workloads a drain evicted, and
whether they are available again, so that the next node is not drained while the pods taken
from the last one are still starting (drain.recoveryTimeoutSeconds).

A workload is the ReplicaSet (a Deployment's pods) that controlled an evicted pod; it is
back once its ready replicas reach its desired replicas and every PodDisruptionBudget that
selects its pods has the healthy pods it wants again. Pods of other controllers (a
StatefulSet, a Job) are not waited for: their controllers bring them back on their own
schedule, which the status of their ReplicaSet-less kind does not say in the same terms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coordinator.domain.nodes.drain import PodRef, ref
from coordinator.domain.nodes.forecast import selects

KIND = "ReplicaSet"


def evicted_workloads(pods: Iterable[Mapping[str, Any]], evicted: Iterable[PodRef]
                      ) -> tuple[str, ...]:
    """The ReplicaSets of the evicted pods that were running ("ReplicaSet namespace/name")."""
    gone = set(evicted)
    found = set()
    for pod in pods:
        if ref(pod) not in gone or (pod.get("status") or {}).get("phase") in ("Succeeded",
                                                                             "Failed"):
            continue
        for owner in pod["metadata"].get("ownerReferences") or []:
            if owner.get("controller") and owner.get("kind") == KIND:
                found.add(f"{KIND} {pod['metadata'].get('namespace', '')}/{owner['name']}")
    return tuple(sorted(found))


def workload_name(workload: str) -> tuple[str, str]:
    """(namespace, name) of "ReplicaSet namespace/name"."""
    namespace, _, name = workload.removeprefix(f"{KIND} ").partition("/")
    return namespace, name


def not_back(replicasets: Mapping[str, Mapping[str, Any] | None],
             budgets: Sequence[Mapping[str, Any]]) -> list[str]:
    """What of the evicted workloads is not available again, as the note names it.
    replicasets: each workload's ReplicaSet as read now, with status (None: deleted since,
    nothing to wait for); budgets: the PodDisruptionBudgets of their namespaces, with
    status."""
    short = []
    for workload, rs in sorted(replicasets.items()):
        if rs is None:
            continue
        wanted = int((rs.get("spec") or {}).get("replicas", 1))
        ready = int((rs.get("status") or {}).get("readyReplicas") or 0)
        if ready < wanted:
            short.append(f"{workload}: {ready} of {wanted} ready")
        namespace, _ = workload_name(workload)
        labels = ((rs.get("spec") or {}).get("template") or {}).get("metadata", {}).get(
            "labels") or {}
        for pdb in budgets:
            meta, status = pdb["metadata"], pdb.get("status") or {}
            if meta["namespace"] != namespace or not selects(
                    (pdb.get("spec") or {}).get("selector"), labels):
                continue
            healthy, desired = int(status.get("currentHealthy", 0)), int(
                status.get("desiredHealthy", 0))
            entry = f"budget {namespace}/{meta['name']}: {healthy} of the {desired} healthy " \
                    "pods it wants"
            if healthy < desired and entry not in short:
                short.append(entry)
    return short
