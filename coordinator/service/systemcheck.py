"""kube-system's workloads for a cluster's status: the `ready` stage is done only once they are
available (domain/nodes/workloads.py). Looked at only when it can matter (the cluster gives
Kubernetes access and every machine is Ready), at most once every CACHE_SECONDS per cluster
(a watched status asks every second or two) and within TIMEOUT_SECONDS, so that an API server
that does not answer slows no status."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from coordinator.domain.model import ClusterSpec, Machine, MachineState, kubernetes_access
from coordinator.domain.nodes.kubeaccess import NO_KUBECONFIG, kube_access
from coordinator.domain.nodes.workloads import SystemWorkloads
from coordinator.kube import Kube, KubeError

CACHE_SECONDS = 2.0
TIMEOUT_SECONDS = 3.0


class SystemCheck:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, SystemWorkloads]] = {}  # cluster -> (when, found)

    async def look(self, spec: ClusterSpec, machines: Sequence[Machine]) -> SystemWorkloads | None:
        """What kube-system's workloads are short of; None when the status has no use for it."""
        if not kubernetes_access(spec):
            return None
        live = [m for m in machines if m.state is not MachineState.DELETING]
        if not live or any(m.state is not MachineState.READY for m in live):
            return None
        cached = self._seen.get(spec.name)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        access = kube_access(spec, machines)
        try:
            if access is None:
                raise KubeError(NO_KUBECONFIG)
            async with asyncio.timeout(TIMEOUT_SECONDS):
                async with await Kube.connect(access.path, access.text) as kube:
                    found = await kube.system_workloads()
        except KubeError as exc:
            found = SystemWorkloads(error=str(exc))
        except TimeoutError:
            found = SystemWorkloads(error=f"the API server did not answer in {TIMEOUT_SECONDS:g}s")
        self._seen[spec.name] = (time.monotonic(), found)
        return found
