"""What operators change: cluster specs, join tokens, approvals and roles, labels,
credentials, deletions, pausing upgrades, the answer to a blocked drain, and the audit trail
of it all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain import versions
from coordinator.domain.approval import approval_address, approved_event, refusal
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
from coordinator.domain.reissue import reissued
from coordinator.domain.removal import quorum_refusal, removal_drain
from coordinator.domain.retries import retried
from coordinator.domain.specs import check_fixed, pause_kept
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
            if before is not None and before.deleting:
                raise Conflict(f"cluster {spec.name} is being deleted")
            spec = pause_kept(before and before.spec, spec)
            machines = await self.store.list_machines(spec.name)
            if before is not None:
                check_fixed(before.spec, spec, machines)
            spec, verdict = versions.admitted(before and before.spec, spec, machines,
                                              allow_downgrade)
            stored = await self.store.put_cluster(spec, self.clock())
            changed = before is None or before.generation != stored.generation
            if changed:
                machines = [replace(m, generation=m.generation + 1) for m in machines]
                verb = "created" if before is None else "updated"
                events = [self._event(
                    spec.name, "cluster-applied",
                    f"cluster {verb}: release {spec.release}, generation {stored.generation}",
                    data={"release": spec.release, "generation": stored.generation})]
                if verdict.downgrade and before is not None:
                    events.append(self._event(spec.name, "downgrade", versions.downgrade_text(
                        before.spec, spec), data={"from": before.spec.settings.kubernetes.version,
                                                  "to": spec.settings.kubernetes.version}))
                await self.writes.commit(machines, events)
                self.notifier.wake(m.id for m in machines)
        self.notifier.kick()
        return Applied(stored, changed,
                       None if before is None else before.spec.settings.upgrade.paused)

    async def delete_cluster(self, name: str) -> None:
        """Every machine runs its reset items and goes; then the cluster goes. The whole
        cluster leaving, no node is drained (its pods have nowhere to go) nor guarded."""
        await self.queries.cluster(name)
        await self.store.mark_cluster_deleting(name)
        for machine in await self.store.list_machines(name):
            await self.delete_machine(machine.id, whole_cluster=True)
        self.notifier.kick()

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
            machine = await self.queries.machine_by_id(machine_id)
            now = self.clock()
            updated, issued = reissued(machine, token_hash(secret), now + ttl, now)
            await self.writes.commit([updated], [issued])
        self.notifier.wake([machine.id])
        return secret, updated

    async def delete_machine(self, machine_id: str, force: bool = False, skip_reset: bool = False,
                             whole_cluster: bool = False) -> Machine | None:
        """Delete a machine: it goes through Deleting (domain/removal.py: its node drained,
        its reset items, its Node deleted) unless it never ran items, or skip_reset removes
        the record at once. A manager whose leaving could cost the control plane its quorum
        is refused (Conflict, saying why) unless forced; the whole cluster leaving, nothing is
        guarded nor drained. Returns the machine unless it is gone; deleting a machine that
        is already leaving changes nothing."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            if machine.state is MachineState.DELETING and not skip_reset:
                return machine
            machines = await self.store.list_machines(machine.cluster)
            refused = None if whole_cluster else quorum_refusal(machine, machines)
            if refused and not force:
                raise Conflict(refused)
            at_once = skip_reset or machine.state is MachineState.PENDING or machine.role is None
            if at_once:
                await self.writes.commit([], [self._event(
                    machine.cluster, "removed",
                    f"{machine.hostname} removed" + (" without reset (skipped)" if skip_reset
                                                     else ""), machine)],
                    removed={machine.id: self.clock()})
            else:
                updated = await self._leave(machine, machines, refused, whole_cluster)
        await self.drainer.cancel(machine.id)  # an upgrade's drain task: its writes are void now
        if at_once:
            self.notifier.wake([machine.id])
            return None
        self._moved(machine.id)
        return updated

    async def _leave(self, machine: Machine, machines: Sequence[Machine], refused: str | None,
                     whole_cluster: bool) -> Machine:
        """Move machine into Deleting, with the drain its removal starts with (none when the
        cluster cannot be reached or leaves whole); refused: the guard it was forced past."""
        spec = (await self.queries.cluster(machine.cluster)).spec
        drain = None if whole_cluster else removal_drain(spec, machines, machine, self.clock())
        updated = replace(machine.with_state(MachineState.DELETING, self.clock()), drain=drain)
        then = "running reset items" if drain is None else "drain, reset items, Node deletion"
        await self._commit_one(
            updated, "state", f"{machine.hostname} {machine.state.value} -> Deleting: {then}"
            + (f" (forced, though {refused})" if refused else ""),
            {"from": machine.state.value, "to": "Deleting", "forced": refused is not None})
        return updated

    async def set_paused(self, name: str, paused: bool) -> StoredCluster:
        """Pause or resume upgrades: the spec's settings.upgrade.paused (a later apply of a
        file that says `paused:` sets it to what the file says; one that does not keeps it)."""
        spec = (await self.queries.cluster(name)).spec
        settings = spec.settings.model_copy(update={
            "upgrade": spec.settings.upgrade.model_copy(update={"paused": paused})})
        applied = await self.apply_cluster(spec.model_copy(update={"settings": settings}))
        if applied.changed:
            await self.writes.record([self._event(
                name, "upgrade", "upgrade " + ("paused: no machine starts upgrading"
                                               if paused else "resumed"))])
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
