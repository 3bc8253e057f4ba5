"""product_uuid and MAC uniqueness across the fleet, which kubeadm can only ask for: a cloned
VM carries its template's, and two such Nodes confuse the kubelet, the CNI and the cloud
provider. A machine's values come from its `machine-identity` precheck (not when its node was
told to ignore that check); the store indexes them (machine_identities), so a registration
finds the machines that share one without reading the fleet. A machine that shares one is
refused approval, with a note naming the other machine and what to do.

Pure: the service looks the holders up and passes them in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

IDENTITY_CHECK = "machine-identity"
PRODUCT_UUID, MAC = "product_uuid", "mac"


@dataclass(frozen=True)
class Holder:
    """Another machine holding one of the values: which value, and which machine."""

    kind: str
    value: str
    machine_id: str
    hostname: str
    cluster: str


def identities(precheck: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """(kind, value) of a machine's product_uuid and MACs, from its last precheck report;
    none when the report has no such check or its node ignores it."""
    checks = precheck.get("checks") if isinstance(precheck, Mapping) else None
    check = next((c for c in checks or () if isinstance(c, Mapping)
                  and c.get("name") == IDENTITY_CHECK and not c.get("ignored")), None)
    data = check.get("data") if check is not None else None
    if not isinstance(data, Mapping):
        return frozenset()
    macs = data.get("macs")
    values = [(PRODUCT_UUID, data.get("product_uuid")),
              *((MAC, m) for m in (macs if isinstance(macs, list) else ()))]
    return frozenset((kind, value.lower()) for kind, value in values
                     if isinstance(value, str) and value)


def clone_problems(holders: Iterable[Holder]) -> tuple[str, ...]:
    """What the operator reads for each value another machine holds, with what to do."""
    problems = []
    for h in sorted(holders, key=lambda h: (h.kind, h.value, h.hostname, h.machine_id)):
        other = f"machine {h.hostname} (id {h.machine_id}, cluster {h.cluster})"
        if h.kind == PRODUCT_UUID:
            fix = ("a cloned VM: give this one a new system UUID (regenerate it in the "
                   "hypervisor, e.g. a new VM from the template rather than a copy) or delete "
                   f"{h.hostname} if it is this host registered before")
        else:
            fix = ("give this interface a new MAC (a cloned VM: regenerate its MACs in the "
                   f"hypervisor) or delete {h.hostname} if it is this host registered before")
        problems.append(f"{IDENTITY_CHECK}: {h.kind} {h.value} is also {other}'s: {fix}")
    return tuple(problems)
