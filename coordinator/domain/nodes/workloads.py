"""Whether the cluster's own workloads run: kube-system's Deployments and DaemonSets (CoreDNS,
the network plugin, kube-proxy) each with every replica available. The cluster is Ready only
then: Nodes Ready with a broken DNS or network plugin is not a working cluster.

Pure: the lists as the API returns them (JSON) in, texts out; kube.py lists them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NAMESPACE = "kube-system"


@dataclass(frozen=True)
class SystemWorkloads:
    """What the last look at kube-system found: the workloads short of available replicas
    (`deployment coredns 1/2 available`), or why it could not look."""

    short: tuple[str, ...] = ()
    error: str = ""

    @property
    def available(self) -> bool:
        return not self.short and not self.error

    def text(self) -> str:
        if self.error:
            return f"{NAMESPACE} not checked: {self.error}"
        return f"{NAMESPACE}: " + ", ".join(self.short)


def short_of_available(deployments: Iterable[Mapping[str, Any]],
                       daemonsets: Iterable[Mapping[str, Any]]) -> SystemWorkloads:
    """The Deployments with fewer available replicas than they want, and the DaemonSets with
    fewer available pods than nodes they should run on, by name."""
    short = []
    for d in sorted(deployments, key=_name):
        wanted = (d.get("spec") or {}).get("replicas", 1)
        have = (d.get("status") or {}).get("availableReplicas") or 0
        if have < wanted:
            short.append(f"deployment {_name(d)} {have}/{wanted} available")
    for ds in sorted(daemonsets, key=_name):
        status = ds.get("status") or {}
        wanted, have = status.get("desiredNumberScheduled", 0), status.get("numberAvailable") or 0
        if have < wanted:
            short.append(f"daemonset {_name(ds)} {have}/{wanted}")
    return SystemWorkloads(tuple(short))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
