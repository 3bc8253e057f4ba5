"""Which pods a drain evicts, skips or cannot move: kubectl drain's filters, as a pure function
of the pods (JSON, as the API returns them) and the cluster's drain settings.

Skipped: mirror pods (the kubelet owns them) and DaemonSet pods (their controller would put
them straight back, and they tolerate the cordon). Blocking, unless the settings allow them:
pods no controller manages (nothing would recreate them: drain.force) and pods with emptyDir
volumes (their data goes: drain.deleteEmptyDirData). Finished pods are always removed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.domain.model import DrainSettings

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodPlan:
    evict: list[PodRef] = field(default_factory=list)
    skipped: list[tuple[PodRef, str]] = field(default_factory=list)
    blocking: list[tuple[PodRef, str]] = field(default_factory=list)  # with the setting to change
    terminating: list[PodRef] = field(default_factory=list)  # already going: waited for


def ref(pod: dict[str, Any]) -> PodRef:
    meta = pod["metadata"]
    return PodRef(meta.get("namespace", ""), meta["name"], meta.get("uid", ""))


def classify(pods: Iterable[dict[str, Any]], settings: DrainSettings) -> PodPlan:
    plan = PodPlan()
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec", {})
        this = ref(pod)
        controller = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")),
                          None)
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            plan.skipped.append((this, "mirror pod"))
        elif controller is not None and controller.get("kind") == "DaemonSet":
            plan.skipped.append((this, "DaemonSet pod"))
        elif meta.get("deletionTimestamp"):
            plan.terminating.append(this)
        elif finished:
            plan.evict.append(this)
        elif controller is None and not settings.force:
            plan.blocking.append((this, "no controller manages it (drain.force)"))
        elif _uses_empty_dir(spec) and not settings.delete_empty_dir_data:
            plan.blocking.append((this, "uses emptyDir data (drain.deleteEmptyDirData)"))
        else:
            plan.evict.append(this)
    return plan


def _uses_empty_dir(spec: dict[str, Any]) -> bool:
    return any("emptyDir" in volume for volume in spec.get("volumes") or [])
