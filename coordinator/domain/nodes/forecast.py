"""What draining a node will meet, read from the live cluster before the upgrade starts: the
pods it evicts, and what will block or slow it, each with a remedy (`upgrade plan`).

From the node's pods (kubectl drain's filters: domain/nodes/drain.py), the namespace's
PodDisruptionBudgets with the disruption controller's status, and the replica count of each
evicted pod's controller:

- blocks: a pod the drain settings do not allow to move; a budget that allows no disruption
  now (`status.disruptionsAllowed` 0), which includes one whose minAvailable equals its pods
  (or maxUnavailable 0): the drain waits on it to its timeout;
- slows: a budget that allows fewer disruptions than it has pods on the node (they go in
  turn, each once its replacement is Ready elsewhere), and a workload with a single replica
  (it is down until its replacement runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from coordinator.domain.model import DrainSettings
from coordinator.domain.nodes.drain import PodRef, classify, ref

Severity = Literal["blocks", "slows"]


@dataclass(frozen=True)
class Hindrance:
    """One thing in a drain's way, and what to do about it."""

    severity: Severity
    what: str
    remedy: str


@dataclass(frozen=True)
class NodeForecast:
    """What draining one node will do: the pods it evicts, and what blocks or slows it."""

    node: str
    evicted: tuple[str, ...] = ()
    hindrances: tuple[Hindrance, ...] = field(default_factory=tuple)

    @property
    def blocked(self) -> bool:
        return any(h.severity == "blocks" for h in self.hindrances)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels, as the API server reads one (matchLabels and
    matchExpressions); an empty selector selects every pod of its namespace, a null one none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _budget_text(pdb: Mapping[str, Any]) -> str:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    rule = (f"minAvailable {spec['minAvailable']}" if "minAvailable" in spec
            else f"maxUnavailable {spec.get('maxUnavailable', 0)}")
    return (f"{rule}, {status.get('currentHealthy', 0)} of {status.get('expectedPods', 0)} "
            "pods healthy")


def forecast(node: str, pods: Sequence[Mapping[str, Any]], budgets: Iterable[Mapping[str, Any]],
             replicas: Mapping[str, int], settings: DrainSettings) -> NodeForecast:
    """What draining node will meet. pods: the node's pods (JSON); budgets: the
    PodDisruptionBudgets of their namespaces, with status; replicas: each controller's desired
    replicas by its uid (a ReplicaSet's, a StatefulSet's), where it was read."""
    plan = classify(pods, settings)
    hindrances = [Hindrance("blocks", f"pod {p}: {why}", f"move or delete pod {p} before the "
                            "upgrade, or allow it with the setting named")
                  for p, why in plan.blocking]
    by_ref = {ref(p): p for p in pods}
    moving = [p for p in plan.evict if (by_ref[p].get("status") or {}).get("phase")
              not in ("Succeeded", "Failed")]
    for pdb in sorted(budgets, key=lambda b: (b["metadata"]["namespace"], b["metadata"]["name"])):
        name = f"{pdb['metadata']['namespace']}/{pdb['metadata']['name']}"
        covered = [p for p in moving if p.namespace == pdb["metadata"]["namespace"]
                   and selects((pdb.get("spec") or {}).get("selector"), _labels(by_ref[p]))]
        if not covered:
            continue
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed", 0))
        names = ", ".join(map(str, covered))
        if allowed == 0:
            hindrances.append(Hindrance(
                "blocks", f"budget {name} allows no disruption now ({_budget_text(pdb)}): "
                f"it holds {names}", f"scale the workload up or relax budget {name} before the "
                "upgrade; or, once blocked, coordinator upgrade force (bypasses the budget)"))
        elif allowed < len(covered):
            hindrances.append(Hindrance(
                "slows", f"budget {name} allows {allowed} disruption(s) at a time "
                f"({_budget_text(pdb)}): {len(covered)} of its pods leave in turn ({names})",
                f"allow time for each replacement to be Ready (drain.timeoutSeconds "
                f"{settings.timeout_seconds:g}), or relax budget {name}"))
    hindrances += _single_replicas(moving, by_ref, replicas)
    return NodeForecast(node, tuple(map(str, plan.evict)), tuple(hindrances))


def _single_replicas(moving: Sequence[PodRef], by_ref: Mapping[PodRef, Mapping[str, Any]],
                     replicas: Mapping[str, int]) -> list[Hindrance]:
    """The evicted pods whose controller wants a single replica: down until replaced."""
    found = []
    for pod in moving:
        owner = next((o for o in (by_ref[pod].get("metadata") or {}).get("ownerReferences") or []
                      if o.get("controller")), None)
        if owner is not None and replicas.get(owner.get("uid", "")) == 1:
            found.append(Hindrance(
                "slows", f"pod {pod} is the only replica of {owner['kind']} {owner['name']}: "
                "it is unavailable until its replacement runs on another node",
                f"run 2 or more replicas of {owner['kind']} {owner['name']} (with a budget) to "
                "keep it up through the drain"))
    return found
