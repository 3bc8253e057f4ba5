"""What operators change: cluster specs, join tokens, approvals and roles, labels,
credentials, deletions, pausing upgrades, the answer to a blocked drain, and the audit trail
of it all. Each operation has one shape: load, one pure decision of the domain returning the
complete Change, one transaction (Writes.apply), wake (docs/architecture.md, "One shape for
every operation")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.assignments.retries import retried
from coordinator.domain.changes import Change
from coordinator.domain.events import event
from coordinator.domain.machines.approval import approval, role_set
from coordinator.domain.machines.deletion import cluster_deletion, removal
from coordinator.domain.machines.labelling import labelling
from coordinator.domain.machines.pooling import (
    in_pool,
    pool_approval,
    pool_removal,
)
from coordinator.domain.machines.reissue import reissue, revocation
from coordinator.domain.machines.tokens import new_reissue_token, token_hash
from coordinator.domain.model import POOL, ClusterSpec, Machine
from coordinator.domain.nodes.draining import drain_answered
from coordinator.domain.records import JoinToken, StoredCluster
from coordinator.domain.releases.clusterapply import applying, pausing, provisioning
from coordinator.service.access import Access
from coordinator.service.drainer import Drainer
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes
from nodeagent.wire.contract import Role
from nodeagent.wire.validation import InvalidDocument, Problem


@dataclass(frozen=True)
class Applied:
    """What `cluster apply` did: the cluster as stored, whether that changed it, whether
    upgrades were paused before (None: a new cluster), so the operator is told of a pause
    the file changed, and what the operator is warned of (versions.warnings)."""

    stored: StoredCluster
    changed: bool
    was_paused: bool | None
    warnings: tuple[str, ...] = ()

    @property
    def outcome(self) -> str:
        """created, changed or unchanged: what the CLI says the apply did."""
        if self.was_paused is None:
            return "created"
        return "changed" if self.changed else "unchanged"


class Admin:
    def __init__(self, writes: Writes, queries: Queries, access: Access, drainer: Drainer,
                 clock: Callable[[], float]) -> None:
        self.writes = writes
        self.store = writes.store
        self.queries = queries
        self.access = access
        self.drainer = drainer
        self.clock = clock

    async def _on_machine(self, machine_id: str,
                          decide: Callable[[Machine], Awaitable[Change]]) -> tuple[Machine, Change]:
        """An operation on one machine: load it (and what decide loads with it), decide its
        change, apply it in one transaction, wake. The machine as loaded, and the change."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            change = await decide(machine)
            await self.writes.apply(change)
        self.writes.wake(change)
        return machine, change

    def _now(self, decide: Callable[[Machine, float], Change]
             ) -> Callable[[Machine], Awaitable[Change]]:
        """A decision on the machine alone, at the time of the operation."""
        async def decided(machine: Machine) -> Change:
            return decide(machine, self.clock())
        return decided

    def _in_cluster(self, decide: Callable[[ClusterSpec, Machine, float], Change]
                    ) -> Callable[[Machine], Awaitable[Change]]:
        """A decision on the machine with its cluster's spec, loaded with it."""
        async def decided(machine: Machine) -> Change:
            spec = (await self.queries.cluster(machine.cluster)).spec
            return decide(spec, machine, self.clock())
        return decided

    async def apply_cluster(self, spec: ClusterSpec, allow_downgrade: bool = False) -> Applied:
        """Store the spec (keeping the stored pause unless it says `paused:`, see
        domain/specs.pause_kept); returns what was stored and whether it changed. Agents
        re-fetch on a change. A Kubernetes version the rules refuse (domain/releases/versions.py: one
        minor at a time, no downgrade unless allow_downgrade, a new release) stores nothing."""
        async with self.writes.lock:
            before = await self.store.get_cluster(spec.name)
            applied = applying(before, spec, await self.store.list_machines(spec.name),
                               self.clock(), allow_downgrade)
            await self.writes.apply(applied.change)
        self.writes.wake(applied.change)
        return Applied(applied.stored, applied.changed,
                       None if before is None else before.spec.settings.upgrade.paused,
                       applied.warnings)

    async def delete_cluster(self, name: str) -> None:
        """Every machine runs its reset items and goes; then the cluster goes. The whole
        cluster leaving, no node is drained (its pods have nowhere to go) nor guarded."""
        async with self.writes.lock:
            stored = await self.queries.cluster(name)
            change = cluster_deletion(stored, await self.store.list_machines(name), self.clock())
            await self.writes.apply(change)
        for machine_id in [*(m.id for m in change.machines), *change.removed]:
            await self.drainer.cancel(machine_id)  # an upgrade's drain task: its writes are void
        self.writes.wake(change)

    async def create_join_token(self, cluster: str, ttl: float | None, max_uses: int | None,
                                auto_approve: bool = False) -> tuple[str, JoinToken]:
        """A join token into cluster, or into the pool (POOL), whose machines auto_approve
        approves once their prechecks pass (a cluster's follow its settings.autoApprove)."""
        if cluster != POOL:
            await self.queries.cluster(cluster)
            if auto_approve:
                raise InvalidDocument([Problem("autoApprove", "only a pool join token approves "
                                               "its machines: a cluster's follow its "
                                               "settings.autoApprove")])
        return await self.access.create_join_token(cluster, ttl, max_uses, auto_approve)

    async def provision(self, name: str) -> tuple[StoredCluster, bool]:
        """`cluster provision`: release the cluster's hold (settings.provision.held), so its
        approved and claimed machines start (domain/releases/clusterapply.py)."""
        async with self.writes.lock:
            stored = await self.queries.cluster(name)
            applied = provisioning(stored, await self.store.list_machines(name), self.clock())
            await self.writes.apply(applied.change)
        self.writes.wake(applied.change)
        return applied.stored, applied.changed

    async def approve(self, machine_id: str, role: Role | None = None,
                      labels: Mapping[str, str] | None = None, interface: str | None = None,
                      ip: str | None = None) -> Machine:
        """Approve a Pending machine as role (else its own), with labels added to its own and
        its cluster address chosen (domain/machines/approval.py): refused while its last precheck
        report does not let it run as that role (its minimums are judged for that role)."""
        async def decide(machine: Machine) -> Change:
            # judged again: the machine it shares a value with may have been deleted since
            clones = await self.queries.clones(machine.id, machine.precheck)
            if in_pool(machine):
                return pool_approval(replace(machine, clones=clones), role, labels, interface,
                                     ip, self.clock())
            return approval(replace(machine, clones=clones), role, labels, interface, ip,
                            self.clock())
        _, change = await self._on_machine(machine_id, decide)
        return change.machines[0]

    async def label(self, machine_id: str, put: Mapping[str, str],
                    remove: Sequence[str]) -> Machine:
        """Set and remove a machine's labels (domain/machines/labelling.py). Its items may depend on
        them, so a change makes its assignment again (a new generation)."""
        machine, change = await self._on_machine(machine_id, self._now(
            lambda m, now: labelling(m, put, remove, now)))
        return change.machines[0] if change.machines else machine

    async def set_role(self, machine_id: str, role: Role) -> Machine:
        """Give a Pending machine its role; an approved one starts with it, so its precheck
        report must let it run as that role, as approving it would require."""
        _, change = await self._on_machine(machine_id, self._now(
            lambda m, now: role_set(m, role, now)))
        return change.machines[0]

    async def revoke_credential(self, machine_id: str) -> Machine:
        """The machine stays listed, but its agent is refused until it is deleted and joins
        again."""
        _, change = await self._on_machine(machine_id, self._now(revocation))
        return change.machines[0]

    async def reissue_credential(self, machine_id: str, ttl: float) -> tuple[str, Machine]:
        """A one-use reissue token bound to the machine (its hash kept, the token returned to
        be shown once), valid ttl seconds; its current credential is revoked at once."""
        secret = new_reissue_token(machine_id)
        _, change = await self._on_machine(machine_id, self._now(
            lambda m, now: reissue(m, token_hash(secret), now + ttl, now)))
        return secret, change.machines[0]

    async def delete_machine(self, machine_id: str, force: bool = False,
                             skip_reset: bool = False) -> Machine | None:
        """Delete a machine (domain/machines/deletion.py: through Deleting, or removed at once; a
        manager whose leaving could cost the quorum refused unless forced). Returns the
        machine unless it is gone; deleting a machine that is already leaving changes
        nothing."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            if in_pool(machine):
                change = pool_removal(machine, self.clock())
            else:
                spec = (await self.queries.cluster(machine.cluster)).spec
                change = removal(machine, await self.store.list_machines(machine.cluster),
                                 spec, self.clock(), force, skip_reset)
            if change is None:
                return machine
            await self.writes.apply(change)
        await self.drainer.cancel(machine.id)  # an upgrade's drain task: its writes are void now
        self.writes.wake(change)
        return change.machines[0] if change.machines else None

    async def set_paused(self, name: str, paused: bool) -> StoredCluster:
        """Pause or resume upgrades: the spec's settings.upgrade.paused (a later apply of a
        file that says `paused:` sets it to what the file says; one that does not keeps it)."""
        async with self.writes.lock:
            applied = pausing(await self.queries.cluster(name), paused,
                              await self.store.list_machines(name), self.clock())
            await self.writes.apply(applied.change)
        self.writes.wake(applied.change)
        return applied.stored

    async def drain_action(self, machine_id: str, action: str) -> Machine:
        """The operator's answer to a drain, an upgrade's or a removal's: retry (a new attempt
        and timeout), skip (run the upgrade or reset items with what is left on the node) or
        force (delete budget-protected pods); domain/nodes/draining.py decides it."""
        await self.drainer.cancel(machine_id)
        _, change = await self._on_machine(machine_id, self._in_cluster(
            lambda spec, m, now: drain_answered(spec, m, action, now)))
        return change.machines[0]

    async def retry_items(self, machine_id: str) -> Machine:
        """Have the item the machine's agent gave up on run again, with a fresh attempt budget
        (domain/assignments/retries.py); Conflict when none was given up."""
        _, change = await self._on_machine(machine_id, self._in_cluster(retried))
        return change.machines[0]

    async def audit(self, actor: str, method: str, path: str, status: int,
                    cluster: str = "") -> None:
        """Record an admin change: who, what, when (the event's time)."""
        await self.writes.record([event(
            self.clock(), cluster, "audit", f"{actor}: {method} {path} -> {status}",
            data={"actor": actor, "method": method, "path": path, "status": status})])

