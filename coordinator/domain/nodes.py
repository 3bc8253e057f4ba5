"""How the coordinator knows which Kubernetes Node is a machine's: by a mark the machine's own
items put on it through the kubelet's flags, never by hostname (a kubelet may register under
another name: --hostname-override, a cloud provider, an FQDN).

The mark is the label `nodeagent.io/machine-id=<machine id>` (kubelet --node-labels), and
failing that the providerID `nodeagent://<cluster>/<machine id>` (kubelet --provider-id).
A profile sets them from `${machine.id}` and `${cluster.name}`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MACHINE_ID_LABEL = "nodeagent.io/machine-id"
PROVIDER_SCHEME = "nodeagent://"


def provider_id(cluster: str, machine_id: str) -> str:
    return f"{PROVIDER_SCHEME}{cluster}/{machine_id}"


def node_of(nodes: Iterable[Mapping[str, Any]], cluster: str, machine_id: str) -> str | None:
    """The name of the machine's Node among nodes (as the API lists them, JSON): the one
    labelled with its id, else the one with its providerID, else None (not registered)."""
    listed = list(nodes)
    for node in listed:
        if (node.get("metadata", {}).get("labels") or {}).get(MACHINE_ID_LABEL) == machine_id:
            return str(node["metadata"]["name"])
    wanted = provider_id(cluster, machine_id)
    for node in listed:
        if (node.get("spec") or {}).get("providerID") == wanted:
            return str(node["metadata"]["name"])
    return None
