"""The composition root: builds the service's parts and hands each the collaborators it
needs, so no part reaches another through a back-reference.

Every read-modify-write of machines happens under one lock (the store's mutex: one for all
replicas sharing a database), so an agent's report and a reconcile pass never overwrite each
other. Planning itself is the pure planner; only the leading replica reconciles."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from coordinator.domain.machines.tokens import DEFAULT_CREDENTIAL_TTL_SECONDS
from coordinator.service.access import Access
from coordinator.service.admin import Admin
from coordinator.service.agents import Agents
from coordinator.service.credentials import CredentialCache
from coordinator.service.drainer import Drainer
from coordinator.service.drains import DrainRecords
from coordinator.service.etcdsnapshots import EtcdSnapshots
from coordinator.service.heartbeats import HEARTBEAT_FLUSH_SECONDS, HeartbeatBuffer
from coordinator.service.history import DEFAULT_RETENTION, EventRetention, Retention
from coordinator.service.leadership import Leadership
from coordinator.service.movetargets import MoveTargets
from coordinator.service.noderecords import NodeRecords
from coordinator.service.nodewatch import NodeWatch
from coordinator.service.notifier import Notifier
from coordinator.service.pivots import PivotLedger
from coordinator.service.postdeploy import PostDeployHosts
from coordinator.service.queries import Queries
from coordinator.service.reconciler import Reconciler
from coordinator.service.refusalaudit import AUDIT_WINDOW_SECONDS, RefusalAudit
from coordinator.service.servingcheck import ServingCheck
from coordinator.service.statuscache import StatusCache
from coordinator.service.systemcheck import SystemCheck
from coordinator.service.versions import VersionCache
from coordinator.service.writes import Writes
from coordinator.store.base import Store


class Coordinator:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time,
                 credential_ttl: float | None = DEFAULT_CREDENTIAL_TTL_SECONDS,
                 retention: Retention = DEFAULT_RETENTION, pivot_file: Path | None = None) -> None:
        self.store = store
        self.clock = clock
        # The pivot this coordinator is in (pivot_file None: kept in memory only).
        self.pivots = PivotLedger(pivot_file, getattr(store, "cipher", None), clock)
        self.notifier = Notifier()
        self.access = Access(store, clock)
        self.credentials = CredentialCache(store, clock)
        self.writes = Writes(store, self.notifier, self.credentials)
        status = StatusCache(store)
        self.writes.on_written(status.written)
        versions = VersionCache(store, clock)
        self.writes.on_written(versions.forget)
        self.queries = Queries(store, clock, status, SystemCheck(), ServingCheck())
        self.heartbeats = HeartbeatBuffer(store, self.writes, clock, self.notifier.kick)
        post_deploy = PostDeployHosts(store)
        self.drainer = Drainer(DrainRecords(self.writes, self.queries, self.notifier, clock), clock)
        self.nodes = NodeWatch(NodeRecords(self.writes, self.queries, clock), clock)
        self.reconciler = Reconciler(self.writes, self.heartbeats, self.notifier, self.drainer,
                                     self.nodes, post_deploy, clock)
        self.leadership = Leadership(store, self.notifier, self.reconciler, self.drainer,
                                     self.nodes, idle=lambda: self.pivots.moved)
        self.move_targets = MoveTargets(self.writes, clock)
        self.agents = Agents(self.writes, self.queries, self.access, self.notifier, versions,
                             post_deploy, self.move_targets, clock, credential_ttl,
                             self.leadership.after_reports)
        self.admin = Admin(self.writes, self.queries, self.access, self.drainer, clock)
        self.refusals = RefusalAudit(self.writes, clock)
        self.etcd_snapshots = EtcdSnapshots(store, self.writes, self.queries, clock)
        self.history = EventRetention(store, clock, retention, status.forget)

    async def run(self, tick: float = 1.0) -> None:
        """Relay wake-ups between replicas, and reconcile while this replica leads."""
        await self.leadership.run(tick)

    async def write_heartbeats(self, interval: float = HEARTBEAT_FLUSH_SECONDS) -> None:
        await self.heartbeats.run(interval)

    async def audit_refusals(self, interval: float = AUDIT_WINDOW_SECONDS) -> None:
        await self.refusals.run(interval)

    async def close(self) -> None:
        """Every report answered, every drain and node task stopped, every heartbeat and
        counted refusal written."""
        await self.agents.close()
        await self.drainer.close()
        await self.nodes.close()
        await self.queries.close()
        await self.heartbeats.flush()
        await self.refusals.flush()
