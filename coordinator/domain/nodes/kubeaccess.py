"""How the coordinator reaches a cluster's Kubernetes API, decided once for every user (drains,
the Node watch, the kube-system check, a removal's drain): the kubeconfig file the cluster's
settings name, else the one the first manager's kubeconfigFrom item reported (a manager being
deleted is no way in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator.domain.model import ClusterSpec, Machine, kubeconfig_reporter


@dataclass(frozen=True)
class KubeAccess:
    """The kubeconfig the coordinator goes through: a file on its host, or a text."""

    path: str | None = None
    text: str | None = None
    # The hostname of the manager whose report text is, for what the status says of it; the
    # same text is the same way in, whoever sent it.
    reporter: str = field(default="", compare=False)


NO_KUBECONFIG = ("no kubeconfig: settings.kubernetes.kubeconfig is not set and no manager "
                 "reported one (kubeconfigFrom on a manager item)")
# Why a drain found no way to the cluster's API: what it cannot do, not what to do about it,
# which its machine's note says once, as its remedy (rollout/remedies.py).
NO_DRAIN = f"{NO_KUBECONFIG}: the node cannot be cordoned and drained"


def kube_access(spec: ClusterSpec, machines: Sequence[Machine]) -> KubeAccess | None:
    """The cluster setting when there is one, else what the first manager reported."""
    if spec.settings.kubernetes.kubeconfig is not None:
        return KubeAccess(path=spec.settings.kubernetes.kubeconfig)
    reporter = kubeconfig_reporter(machines)
    return None if reporter is None else KubeAccess(text=reporter.kubeconfig,
                                                    reporter=reporter.hostname)
