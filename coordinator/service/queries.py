"""Every read the API answers, and the composition of a cluster's status: handlers stay thin,
and no handler reaches into the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coordinator.domain.errors import Conflict, Gone, NotFound
from coordinator.domain.machines.clones import clone_problems, identities
from coordinator.domain.model import POOL, ClusterSpec, Machine
from coordinator.domain.nodes.certificates import Certificates, certificate_status, source_of
from coordinator.domain.nodes.kubeaccess import kube_access
from coordinator.domain.nodes.kubeconfig import server_of
from coordinator.domain.pool.claims import RoleHeld, claims, held
from coordinator.domain.pool.remediation import Remediation, Unhealthy, remediation, unhealthy
from coordinator.domain.records import (
    AdminToken,
    Event,
    JoinToken,
    MachineCount,
    RemovedMachine,
    StoredCluster,
)
from coordinator.domain.releases import versions
from coordinator.domain.rollout import planner
from coordinator.domain.specs.specs import check_fixed, pause_kept
from coordinator.domain.views.fleet import Fleet
from coordinator.domain.views.machinelist import MachineQuery
from coordinator.domain.views.rendering import Rendering, render_cluster
from coordinator.domain.views.status import (
    PostDeploy,
    Rollout,
    Stage,
)
from coordinator.service import snapshot
from coordinator.service.forecasts import drain_forecasts
from coordinator.service.servingcheck import ServingCheck
from coordinator.service.statuscache import StatusCache, status_order
from coordinator.service.systemcheck import SystemCheck
from coordinator.store.base import Store, StoreError
from nodeagent.wire.contract import Phase

log = logging.getLogger("coordinator")


def certificates(spec: ClusterSpec, managers: Sequence[Machine], now: float,
                 serving: ServingCheck | None) -> Certificates | None:
    """The expiry of the client certificate the coordinator reaches the cluster with (the
    kubeconfig a manager reported, or the file the settings name: read here, since an operator
    replaces it when they renew), and of the certificate its API server serves."""
    access = kube_access(spec, managers)
    if access is None:
        return None
    text = access.text or ""
    if access.path is not None:
        try:
            text = Path(access.path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return Certificates(source_of(access), problem=f"cannot read it: {exc}")
    server = server_of(text) or ""
    found = serving.look(spec.name, server) \
        if serving is not None and server.startswith("https://") else None
    return certificate_status(spec.name, access, text, now, found)


@dataclass(frozen=True)
class MachinePage:
    """A page of GET /v1/machines, with what its machines' views need."""

    machines: list[Machine]
    total: int  # how many machines the filters select, on every page
    specs: dict[str, ClusterSpec]
    managers: dict[str, list[Machine]]  # by cluster: where what a machine waits for comes from


@dataclass(frozen=True)
class ClusterStatus:
    """A cluster's rollout as the status view shows it."""

    stored: StoredCluster
    machines: list[Machine]
    counts: dict[str, int]
    post_deploy: PostDeploy
    stages: list[Stage]
    rollout: Rollout
    now: float
    certificates: Certificates | None = None  # None: the coordinator has no kubeconfig for it
    # Its claims on the pool (spec.pool): each role's count and what it holds, and what it
    # cannot fill or give back now, and why (domain/pool/claims.py).
    claimed: tuple[RoleHeld, ...] = ()
    claim_notes: tuple[str, ...] = ()


class Queries:
    def __init__(self, store: Store, clock: Callable[[], float], status: StatusCache,
                 system: SystemCheck | None = None, serving: ServingCheck | None = None) -> None:
        self.store = store
        self.clock = clock
        self.status = status  # what the status is computed from, kept between calls
        self.system = system  # kube-system's workloads, for the `ready` stage
        self.serving = serving  # the API servers' serving certificates, for the status

    async def close(self) -> None:
        if self.serving is not None:
            await self.serving.close()

    async def clones(self, machine_id: str, precheck: Mapping[str, Any]) -> tuple[str, ...]:
        """What of the product_uuid and MACs in precheck another machine holds, naming it
        (domain/machines/clones.py): a few indexed look-ups."""
        return clone_problems(await self.store.identity_holders(identities(precheck),
                                                                machine_id))

    async def cluster(self, name: str) -> StoredCluster:
        if name == POOL:
            raise Conflict("the machine is in the pool, of no cluster: this asks for a machine "
                           "a cluster claimed")
        stored = await self.store.get_cluster(name)
        if stored is None:
            raise NotFound(f"no cluster named {name}")
        return stored

    async def spec_of(self, machine: Machine) -> ClusterSpec | None:
        """The spec of the machine's cluster (None once the cluster is gone)."""
        stored = await self.store.get_cluster(machine.cluster)
        return stored.spec if stored else None

    async def clusters(self) -> list[StoredCluster]:
        return await self.store.list_clusters()

    async def machine_by_id(self, machine_id: str) -> Machine:
        machine = await self.store.get_machine(machine_id)
        if machine is None:
            raise await self.missing(machine_id)
        return machine

    async def missing(self, machine_id: str) -> Gone | NotFound:
        """Why there is no machine with this id: Gone when it was deleted (its agent is told
        when, and that it must register again), else NotFound."""
        removed = await self.store.removed_machine(machine_id)
        if removed is not None:
            return Gone(removed.notice())
        return NotFound(f"no machine {machine_id}")

    async def machine(self, ref: str, cluster: str | None = None) -> Machine:
        """A machine by id or hostname (hostnames are unique within a cluster), in cluster when
        one is named: a hostname in several clusters needs it."""
        machine = await self.store.get_machine(ref)
        if machine is not None and cluster in (None, machine.cluster):
            return machine
        matches = await self.store.machines_by_hostname(ref, cluster)
        if len(matches) > 1:
            clusters = ", ".join(sorted(m.cluster for m in matches))
            raise Conflict(f"hostname {ref} exists in clusters {clusters}: name one (--cluster, "
                           "or ?cluster= in the API) or use the machine id")
        if not matches:
            raise NotFound(f"no machine with id or hostname {ref}"
                           + (f" in cluster {cluster}" if cluster else ""))
        return matches[0]

    async def removed(self, ref: str, cluster: str | None = None) -> list[RemovedMachine]:
        """What is kept of deleted machines by id or hostname (in cluster, when named), the
        most recently removed first: their history stays readable by the name people know."""
        removed = await self.store.removed_machine(ref)
        if removed is not None and cluster in (None, removed.cluster):
            return [removed]
        return await self.store.removed_by_hostname(ref, cluster)

    async def machines(self, cluster: str | None = None) -> tuple[list[Machine], dict[str, ClusterSpec]]:
        """The machines (of one cluster, or all), with the specs of their clusters."""
        specs = {c.spec.name: c.spec for c in await self.store.list_clusters()}
        return await self.store.list_machines(cluster), specs

    async def machine_page(self, query: MachineQuery) -> MachinePage:
        """One page of GET /v1/machines: the database chooses it on the listed fields'
        columns, and only its machines are decoded, with their clusters' managers (what a
        machine waits for is produced on a manager)."""
        page, total = await self.store.machine_page(query)
        found = {m.id: m for m in await self.store.get_machines(page)}
        machines = [found[i] for i in page if i in found]  # none deleted meanwhile
        specs = {c.spec.name: c.spec for c in await self.store.list_clusters()}
        managers = {name: await self.store.list_machines(name, role="manager")
                    for name in {m.cluster for m in machines}}
        return MachinePage(machines, total, specs, managers)

    async def join_tokens(self, cluster: str | None) -> list[JoinToken]:
        if cluster:  # POOL: the pool's
            await self.cluster(cluster)
        return await self.store.list_join_tokens(cluster)

    async def admin_tokens(self) -> list[AdminToken]:
        return await self.store.list_admin_tokens()

    async def events(self, **filters: Any) -> list[Event]:
        """One page of history (see Store.list_events for the filters)."""
        return await self.store.list_events(**filters)

    async def newest_event_id(self) -> int:
        newest = await self.store.list_events(newest_first=True, limit=1)
        return newest[0].id if newest else 0

    async def count_machines(self) -> list[MachineCount]:
        return await self.store.count_machines()

    async def check_store(self) -> None:
        """Raises when the store cannot be read: the replica is not ready."""
        await self.store.list_clusters()

    async def archive(self, data_dir: Path, advertise_url: str) -> bytes:
        """The whole state, with data_dir's PKI and secrets key and the URL its agents reach it
        at, as one archive (service/snapshot.py): a backup's, or a frozen pivot's snapshot.
        Encoded off the event loop, so that agents are never kept waiting by it."""
        taken = await snapshot.take(self.store, data_dir, advertise_url)
        return await asyncio.to_thread(snapshot.to_bytes, taken)

    async def upgrade_plan(self, name: str, spec: ClusterSpec | None = None,
                           allow_downgrade: bool = False
                           ) -> tuple[ClusterSpec, planner.UpgradePlan]:
        """The steps an upgrade to spec (default: the stored one) would take; changes nothing.
        A spec its apply would refuse is refused here alike, and what it would warn of is
        warned of first, in its words."""
        stored = await self.cluster(name)
        if spec is not None and spec.name != name:
            raise Conflict(f"the spec is for cluster {spec.name}, not {name}")
        target = pause_kept(stored.spec, spec) if spec else stored.spec
        machines = await self.store.list_machines(name)
        check_fixed(stored.spec, target, machines)  # what its apply would refuse
        target, verdict = versions.admitted(stored.spec, target, machines, allow_downgrade)
        plan = planner.upgrade_plan(target, machines)
        warned = versions.warnings(stored.spec, target, verdict)
        forecasts, notes = await drain_forecasts(
            target, machines, [u.machine for step in plan.steps for u in step])
        held = planner.upgrade_held(target, machines, self.clock())
        if held is not None and plan.steps and not target.settings.upgrade.paused:
            # the plan shows what starts once it may (a pause says so in its first line)
            notes.insert(0, f"not now: {held}")
        return target, replace(plan, warnings=[*warned, *plan.warnings],
                               notes=[*plan.notes, *notes], forecasts=forecasts)

    async def rendering(self, name: str, spec: ClusterSpec | None = None,
                        fleet: Fleet | None = None, machine: str | None = None,
                        phase: Phase | None = None) -> Rendering:
        """What the machines of cluster name would run under spec (default: the stored one),
        or a hypothetical fleet would; a spec may be rendered before its cluster is stored.
        Which values are secret is the stored spec's to say, not spec's: a read-only token
        may send any spec. Changes nothing."""
        stored: StoredCluster | None
        if spec is None:
            stored = await self.cluster(name)
            spec = stored.spec
        elif spec.name != name:
            raise Conflict(f"the spec is for cluster {spec.name}, not {name}")
        else:
            stored = await self.store.get_cluster(name)
        machines = [] if stored is None or fleet else await self.store.list_machines(name)
        return render_cluster(spec, machines, fleet, machine, phase,
                              stored=None if stored is None else stored.spec,
                              kept=None if stored is None else stored.outputs)

    async def warm_status(self) -> None:
        """Compute every cluster's status once, so that the first dashboard opened after a
        start does not wait the second or so a cluster of 10,000 machines takes to read whole."""
        try:
            for stored in await self.clusters():
                with contextlib.suppress(NotFound):  # deleted meanwhile
                    await self.cluster_status(stored.spec.name, machines=False)
        except StoreError as exc:  # the first status asked for reads it instead
            log.warning("cannot compute the clusters' status ahead: %s", exc)

    async def cluster_status(self, name: str, machines: bool = True) -> ClusterStatus:
        """The status from what the status cache keeps (read on from the last call); with
        machines, every machine as read now too, for their views (their last heartbeats)."""
        stored = await self.cluster(name)
        spec = stored.spec
        kept = await self.status.current(stored)
        system = await self.system.look(spec, kept.machines) if self.system is not None else None
        now = self.clock()
        summary = kept.memo.summary(spec, stored.created_at, kept.machines, kept.history, now,
                                    system)
        listed = status_order(await self.store.list_machines(name)) if machines else kept.machines
        claimed, notes = await self._claims(stored, kept.machines, now)
        return ClusterStatus(stored, listed, summary.counts, summary.post_deploy,
                             summary.stages, summary.rollout, now,
                             certificates(spec, kept.managers, now, self.serving),
                             claimed, notes)

    async def _claims(self, stored: StoredCluster, members: Sequence[Machine],
                      now: float) -> tuple[tuple[RoleHeld, ...], tuple[str, ...]]:
        """How the cluster's claims on the pool stand (none: it claims nothing), judged as the
        reconcile pass judges them, by the heartbeats written so far: on its machines as the
        status cache keeps them, and the pool as it is now."""
        spec = stored.spec
        if spec.pool is None and spec.settings.health.unhealthy_after_seconds is None:
            return (), ()
        pool = await self.store.list_machines(POOL)
        healing = remediation(spec, members, now).notes
        found = claims(spec, members, pool, {}, now, stored.deleting)
        return tuple(held(spec, members)), (*healing, *found.notes)

    async def remediation_plan(self, name: str) -> tuple[ClusterSpec, list[Unhealthy],
                                                         Remediation]:
        """`machines remediate --dry-run`: the cluster's unhealthy machines, and what its health
        policy does about them now (domain/pool/remediation.py), changing nothing."""
        stored = await self.cluster(name)
        members = await self.store.list_machines(name)
        found = [u for m in members if (u := unhealthy(stored.spec, m)) is not None]
        return stored.spec, found, remediation(stored.spec, members, self.clock())
