"""What operators change: cluster specs, join tokens, approvals and roles, labels,
credentials, deletions, pausing upgrades, the answer to a blocked drain, and the audit trail
of it all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.approval import approval_address, approved_event, refusal
from coordinator.domain.changes import Change
from coordinator.domain.clusterapply import applying, pausing
from coordinator.domain.deletion import cluster_deletion, removal
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.labels import label_list, relabelled
from coordinator.domain.model import (
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    needs_drain,
)
from coordinator.domain.records import Event, JoinToken, StoredCluster
from coordinator.domain.reissue import reissue
from coordinator.domain.retries import retried
from coordinator.domain.tokens import new_reissue_token, token_hash
from coordinator.service.access import Access
from coordinator.service.drainer import Drainer
from coordinator.service.notifier import Notifier
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes
from nodeagent.wire.contract import Role


@dataclass(frozen=True)
class Applied:
    """What `cluster apply` did: the cluster as stored, whether that changed it, and whether
    upgrades were paused before (None: a new cluster), so the operator is told of a pause
    the file changed."""

    stored: StoredCluster
    changed: bool
    was_paused: bool | None


class Admin:
    def __init__(self, writes: Writes, queries: Queries, access: Access, notifier: Notifier,
                 drainer: Drainer, clock: Callable[[], float]) -> None:
        self.writes = writes
        self.store = writes.store
        self.queries = queries
        self.access = access
        self.notifier = notifier
        self.drainer = drainer
        self.clock = clock

    def _event(self, cluster: str, kind: str, message: str, machine: Machine | None = None,
               data: dict | None = None) -> Event:
        return event(self.clock(), cluster, kind, message, machine, data)

    async def _commit_one(self, updated: Machine, kind: str, message: str,
                          data: dict | None = None) -> None:
        await self.writes.commit([updated], [self._event(updated.cluster, kind, message,
                                                         updated, data)])

    async def _commit(self, change: Change) -> None:
        """The operation's change written, when it writes anything."""
        if change.writes:
            await self.writes.apply(change)

    def _moved(self, *machine_ids: str) -> None:
        """Machines changed: their agents, the watchers and the reconciler hear of it."""
        if machine_ids:
            self.notifier.wake(machine_ids)
        else:
            self.notifier.changed()
        self.notifier.kick()

    async def apply_cluster(self, spec: ClusterSpec, allow_downgrade: bool = False) -> Applied:
        """Store the spec (keeping the stored pause unless it says `paused:`, see
        domain/specs.pause_kept); returns what was stored and whether it changed. Agents
        re-fetch on a change. A Kubernetes version the rules refuse (domain/versions.py: one
        minor at a time, no downgrade unless allow_downgrade, a new release) stores nothing."""
        async with self.writes.lock:
            before = await self.store.get_cluster(spec.name)
            applied = applying(before, spec, await self.store.list_machines(spec.name),
                               self.clock(), allow_downgrade)
            await self._commit(applied.change)
        self.writes.wake(applied.change)
        return Applied(applied.stored, applied.changed,
                       None if before is None else before.spec.settings.upgrade.paused)

    async def delete_cluster(self, name: str) -> None:
        """Every machine runs its reset items and goes; then the cluster goes. The whole
        cluster leaving, no node is drained (its pods have nowhere to go) nor guarded."""
        async with self.writes.lock:
            stored = await self.queries.cluster(name)
            change = cluster_deletion(stored, await self.store.list_machines(name), self.clock())
            await self._commit(change)
        for machine_id in [*(m.id for m in change.machines), *change.removed]:
            await self.drainer.cancel(machine_id)  # an upgrade's drain task: its writes are void
        self.writes.wake(change)

    async def create_join_token(self, cluster: str, ttl: float | None,
                                max_uses: int | None) -> tuple[str, JoinToken]:
        await self.queries.cluster(cluster)
        return await self.access.create_join_token(cluster, ttl, max_uses)

    async def approve(self, machine_id: str, role: Role | None = None,
                      labels: Mapping[str, str] | None = None, interface: str | None = None,
                      ip: str | None = None) -> Machine:
        """Approve a Pending machine as role (else its own), with labels added to its own and
        its cluster address chosen (domain/approval.py): refused while its last precheck
        report does not let it run as that role (its minimums are judged for that role)."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            if machine.state is not MachineState.PENDING:
                raise Conflict(f"{machine.hostname} is {machine.state.value}, not Pending")
            # judged again: the machine it shares a value with may have been deleted since
            machine = replace(machine, clones=await self.queries.clones(machine.id,
                                                                        machine.precheck))
            refused = refusal(machine, role)
            if refused:
                raise Conflict(refused)
            updated = replace(machine, approved=True, role=role or machine.role, clones=(),
                              ip=approval_address(machine, interface, ip),
                              labels={**machine.labels, **(labels or {})})
            await self.writes.commit([updated], [approved_event(self.clock(), updated)])
        self._moved()
        return updated

    async def label(self, machine_id: str, put: Mapping[str, str],
                    remove: Sequence[str]) -> Machine:
        """Set and remove a machine's labels. Its items may depend on them (${machine.labels},
        `when: labels`), so a change makes its assignment again (a new generation)."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            labels = relabelled(machine.labels, put, remove)
            if labels == machine.labels:
                return machine
            updated = replace(machine, labels=labels, generation=machine.generation + 1)
            await self._commit_one(updated, "labels", f"{machine.hostname} labels: "
                                   f"{label_list(labels) or 'none'}",
                                   {"labels": labels, "set": dict(put), "removed": list(remove)})
        self._moved(machine.id)
        return updated

    async def set_role(self, machine_id: str, role: Role) -> Machine:
        """Give a Pending machine its role; an approved one starts with it, so its precheck
        report must let it run as that role, as approving it would require."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            if machine.state is not MachineState.PENDING:
                raise Conflict(f"{machine.hostname} is {machine.state.value}: its role is fixed "
                               "once it left Pending")
            refused = refusal(machine, role) if machine.approved else None
            if refused:
                raise Conflict(refused)
            updated = replace(machine, role=role)
            await self._commit_one(updated, "role", f"{machine.hostname} role set to {role}",
                                   {"role": role})
        self._moved()
        return updated

    async def revoke_credential(self, machine_id: str) -> Machine:
        """The machine stays listed, but its agent is refused until it is deleted and joins
        again."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            updated = replace(machine, credential_hash="", credential_expires_at=None)
            await self._commit_one(updated, "credential", f"{machine.hostname}: credential revoked")
        self.notifier.wake([machine.id])
        return updated

    async def reissue_credential(self, machine_id: str, ttl: float) -> tuple[str, Machine]:
        """A one-use reissue token bound to the machine (its hash kept, the token returned to
        be shown once), valid ttl seconds; its current credential is revoked at once."""
        secret = new_reissue_token(machine_id)
        async with self.writes.lock:
            now = self.clock()
            change = reissue(await self.queries.machine_by_id(machine_id), token_hash(secret),
                             now + ttl, now)
            await self.writes.apply(change)
        self.writes.wake(change)
        return secret, change.machines[0]

    async def delete_machine(self, machine_id: str, force: bool = False,
                             skip_reset: bool = False) -> Machine | None:
        """Delete a machine (domain/deletion.py: through Deleting, or removed at once; a
        manager whose leaving could cost the quorum refused unless forced). Returns the
        machine unless it is gone; deleting a machine that is already leaving changes
        nothing."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            spec = (await self.queries.cluster(machine.cluster)).spec
            change = removal(machine, await self.store.list_machines(machine.cluster), spec,
                             self.clock(), force, skip_reset)
            if change is None:
                return machine
            await self._commit(change)
        await self.drainer.cancel(machine.id)  # an upgrade's drain task: its writes are void now
        self.writes.wake(change)
        return change.machines[0] if change.machines else None

    async def set_paused(self, name: str, paused: bool) -> StoredCluster:
        """Pause or resume upgrades: the spec's settings.upgrade.paused (a later apply of a
        file that says `paused:` sets it to what the file says; one that does not keeps it)."""
        async with self.writes.lock:
            applied = pausing(await self.queries.cluster(name), paused,
                              await self.store.list_machines(name), self.clock())
            await self._commit(applied.change)
        self.writes.wake(applied.change)
        return applied.stored

    async def drain_action(self, machine_id: str, action: str) -> Machine:
        """The operator's answer to a drain, an upgrade's or a removal's: retry (a new attempt
        and timeout), skip (run the upgrade or reset items with what is left on the node) or
        force (delete budget-protected pods)."""
        await self.drainer.cancel(machine_id)
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            stored = await self.queries.cluster(machine.cluster)
            leaving = machine.state is MachineState.DELETING and machine.drain is not None
            if not leaving and (machine.state is not MachineState.UPGRADE
                                or not needs_drain(stored.spec, machine)):
                raise Conflict(f"{machine.hostname} is {machine.state.value}: it has no drain to "
                               f"{action}")
            current = machine.drain or DrainStatus(DrainStage.DRAINING, self.clock(), attempt=0)
            if current.stage not in (DrainStage.DRAINING, DrainStage.BLOCKED):
                raise Conflict(f"{machine.hostname}: its drain is {current.stage.value}, nothing "
                               f"to {action}")
            status = _answered(current, action, self.clock(), "resetting" if leaving else "upgrading")
            updated = replace(machine, drain=status, generation=machine.generation + 1)
            await self._commit_one(updated, "drain", f"{machine.hostname}: operator chose "
                                   f"{action} (drain attempt {status.attempt})", {"action": action})
        self._moved(machine.id)
        return updated

    async def retry_items(self, machine_id: str) -> Machine:
        """Have the item the machine's agent gave up on run again, with a fresh attempt budget
        (domain/retries.py); Conflict when none was given up."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            spec = (await self.queries.cluster(machine.cluster)).spec
            updated, retry = retried(spec, machine, self.clock())
            await self.writes.commit([updated], [retry])
        self._moved(machine.id)
        return updated

    async def audit(self, actor: str, method: str, path: str, status: int,
                    cluster: str = "") -> None:
        """Record an admin change: who, what, when (the event's time)."""
        await self.writes.record([self._event(
            cluster, "audit", f"{actor}: {method} {path} -> {status}",
            data={"actor": actor, "method": method, "path": path, "status": status})])


def _answered(current: DrainStatus, action: str, now: float, going_on: str) -> DrainStatus:
    """The drain once the operator answered it; going_on: what the machine does next."""
    if action == "skip":
        return replace(current, stage=DrainStage.SKIPPED, message=(
            f"drain skipped by the operator; {going_on} with "
            f"{len(current.blocking_pods)} pods left on the node"))
    return DrainStatus(DrainStage.DRAINING, now, current.attempt + 1, force=action == "force")
