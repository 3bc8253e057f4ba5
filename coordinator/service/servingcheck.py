"""The API server's serving certificate for a cluster's status: read from a TLS handshake with
the server the kubeconfig in use names, at most every CACHE_SECONDS per cluster and in the
background, so that a status never waits on an API server that does not answer (it shows what
the last look found, or nothing yet)."""

from __future__ import annotations

import asyncio
import time

from coordinator.domain.nodes.kubeconfig import ClientCertificate
from coordinator.kube import KubeError, serving_certificate

CACHE_SECONDS = 300.0
TIMEOUT_SECONDS = 3.0
Found = ClientCertificate | str  # the certificate, or why it could not be read


class ServingCheck:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, str, Found]] = {}  # cluster -> (when, server, found)
        self._looking: dict[str, asyncio.Task[None]] = {}

    def look(self, cluster: str, server: str) -> Found | None:
        """What the last look at server found (None: not looked at yet); a new look started
        when that one is stale or was at another server."""
        seen = self._seen.get(cluster)
        fresh = seen is not None and seen[1] == server and \
            time.monotonic() - seen[0] < CACHE_SECONDS
        running = self._looking.get(cluster)
        if not fresh and (running is None or running.done()):
            self._looking[cluster] = asyncio.create_task(self._read(cluster, server),
                                                         name=f"serving certificate of {cluster}")
        return seen[2] if seen is not None and seen[1] == server else None

    async def _read(self, cluster: str, server: str) -> None:
        try:
            found: Found = await serving_certificate(server, TIMEOUT_SECONDS)
        except KubeError as exc:
            found = str(exc)
        self._seen[cluster] = (time.monotonic(), server, found)

    async def close(self) -> None:
        for task in self._looking.values():
            task.cancel()
        await asyncio.gather(*self._looking.values(), return_exceptions=True)
