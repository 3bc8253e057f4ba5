"""Which manager runs a cluster's post-deploy step, as the last reconcile pass found it: an
agent's assignment asks for it, and a whole-cluster read per assignment would cost too much."""

from __future__ import annotations

from coordinator.domain.records import StoredCluster
from coordinator.domain.rollout import planner
from coordinator.store.base import Store


class PostDeployHosts:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._hosts: dict[str, tuple[int, str | None]] = {}  # cluster -> (generation, machine id)

    def found(self, stored: StoredCluster, host: str | None) -> None:
        """What a pass found for this spec generation."""
        self._hosts[stored.spec.name] = (stored.generation, host)

    def forget(self, cluster: str | None = None) -> None:
        """A post-deploy report, or another replica's write, makes the pass's answer stale:
        the items it named may be done, or be others now (None: every cluster)."""
        if cluster is None:
            self._hosts.clear()
        else:
            self._hosts.pop(cluster, None)

    async def host(self, stored: StoredCluster) -> str | None:
        """The id of the manager to run the post-deploy step: as the last pass found for this
        spec, or else from the whole cluster."""
        cached = self._hosts.get(stored.spec.name)
        if cached is not None and cached[0] == stored.generation:
            return cached[1]
        host = planner.post_deploy_host(stored.spec,
                                        await self.store.list_machines(stored.spec.name))
        return host.id if host else None
