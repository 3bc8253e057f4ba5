"""The gate into Deploy: the Kubernetes prerequisites a cluster's prepare items establish
(forwarding, bridge netfilter, swap, the container runtime) checked again once they ran, as
kubeadm runs its preflight right before init and join. A machine whose prepare items are
applied stays in Prepare until its agent's report after them (`nodeagent precheck
--prepared`) passes, and the containerd it measured is recent enough for the cluster's
Kubernetes version, which only the coordinator knows.

Pure: from the spec's Kubernetes version and the machine's stored report."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.wire.protocol import PrecheckReport, Stage, Status

RUNTIME_CHECK = "container-runtime"
# What each Kubernetes minor runs on, from the two projects' own words; a row applies from its
# minor on. 1.26: the kubelet speaks CRI v1 only, which containerd serves from v1.6.15 and
# v1.7.0, and every 2.x (containerd's RELEASES.md, its deprecated-versions table). 1.36: no
# containerd 1.x at all (Kubernetes 1.35's release notes: "the last release to support the
# containerd v1.X series"; the kubelet reports such nodes in kubelet_cri_losing_support).
# That is what is refused below. RELEASES.md's per-minor rows recommend later patches (1.33:
# 1.6.36+, 1.7.24+, 2.0.4+) as the most tested: advice, not refused. The kubeadm profile
# installs containerd.io from the Docker repository, which is past every row.
CONTAINERD_MINIMUMS: tuple[tuple[tuple[int, int], tuple[tuple[int, int, int], ...]], ...] = (
    ((1, 26), ((1, 6, 15), (1, 7, 0), (2, 0, 0))),
    ((1, 36), ((2, 0, 0),)),
)
CONTAINERD_REMEDY = ("have the prepare items install a containerd the cluster's Kubernetes "
                     "version runs on (the kubeadm profile installs containerd.io from the "
                     "Docker repository), then restart its agent")
_NUMBERS = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Unmet:
    """A prerequisite that does not hold: the check, why, and what to do."""

    check: str
    why: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.check}: {self.why}"


@dataclass(frozen=True)
class Gate:
    """Whether a prepared machine may enter Deploy: `checked` once its agent reported the
    prerequisites after Prepare (None: its agent only checks before approval, whose report
    held them as hard checks then), `unmet` what fails."""

    checked: bool | None
    unmet: tuple[Unmet, ...] = ()

    @property
    def open(self) -> bool:
        return self.checked is not False and not self.unmet


def _version(text: str) -> tuple[int, ...] | None:
    found = _NUMBERS.match(text.strip())
    return tuple(int(n or 0) for n in found.groups()) if found else None


def containerd_shortfall(kubernetes: str, containerd: str) -> str | None:
    """Why containerd (a version `containerd --version` printed) is too old for Kubernetes
    kubernetes; None when it is not, or the version of either cannot be read."""
    k8s, runtime = _version(kubernetes), _version(containerd)
    if k8s is None or runtime is None:
        return None
    rows = [mins for since, mins in CONTAINERD_MINIMUMS if k8s[:2] >= since]
    if not rows:
        return None
    series = [m for m in rows[-1] if m[:2] == runtime[:2]] or \
        [m for m in rows[-1] if m[:2] > runtime[:2]][:1]
    if not series or runtime >= series[0]:
        return None
    wanted = " or ".join(".".join(map(str, m)) + "+" for m in rows[-1])
    return (f"containerd {containerd} is older than Kubernetes {kubernetes} supports "
            f"(it runs on containerd {wanted})")


def deploy_gate(kubernetes: str | None, precheck: Mapping[str, Any]) -> Gate:
    """The gate for a machine whose prepare items are applied, from its last report."""
    try:
        report = PrecheckReport.model_validate(precheck)
    except ValueError:
        return Gate(False)
    if report.prepared is None:
        return Gate(None)
    if not report.prepared:
        return Gate(False)
    unmet = [Unmet(c.name, c.message, c.remedy) for c in report.checks
             if c.status is Status.FAIL and c.stage is Stage.PREPARE]
    runtime = next((c for c in report.checks if c.name == RUNTIME_CHECK), None)
    measured = runtime.data.get("containerd") if runtime is not None else None
    if kubernetes and isinstance(measured, str) and not (runtime and runtime.ignored):
        why = containerd_shortfall(kubernetes, measured)
        if why:
            unmet.append(Unmet(RUNTIME_CHECK, why, CONTAINERD_REMEDY))
    return Gate(True, tuple(unmet))

