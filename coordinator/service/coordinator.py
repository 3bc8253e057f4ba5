"""What the coordinator does, independent of HTTP: the operations behind every endpoint.

Every read-modify-write of machines happens under one lock (the store's mutex: one for all
replicas sharing a database), so an agent's report and a reconcile pass never overwrite each
other. Planning itself is the pure planner; only the leader replica runs the reconcile loop.

At scale (issue 8): heartbeats are kept in memory and written in batches; every machine write
marks the machine changed, and a reconcile pass reloads and plans on just the changed
machines and the cluster's working set (fleetview.ClusterView), plus the machines whose last
heartbeat passed the timeout since the previous pass. Replicas relay the ids of the machines
they wrote (notifier), which marks them changed on the leader and drops them from every
replica's credential cache. Item reports are group-committed (groupcommit.GroupCommit): all
that queued behind the lock go in one transaction, each answered on its own once durable;
on the leader, a batch in which an item succeeded is followed at once, under the same lock,
by the reconcile pass it asks for. A pass plans on the machines this replica wrote as it
wrote them (with the heartbeats written since), and reads again only those written elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from coordinator.domain import planner
from coordinator.domain.errors import Conflict, NotFound, Unauthorized
from coordinator.domain.kubeconfig import kubeconfig_problem
from coordinator.domain.model import (
    PHASE_OF_STATE,
    ROLES,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
    Role,
    deployed_managers,
    needs_drain,
    phase_items,
    upgrade_items_may_run,
)
from coordinator.domain.records import CredentialOwner, Event, JoinToken, StoredCluster
from coordinator.domain.tokens import DEFAULT_CREDENTIAL_TTL_SECONDS, new_token, token_hash
from coordinator.domain.workingset import ClusterView
from coordinator.service.access import Access
from coordinator.service.drainer import Drainer
from coordinator.service.groupcommit import GroupCommit, Pending
from coordinator.service.notifier import Notifier
from coordinator.store.base import Store, Term, leader_epoch
from nodeagent.protocol import (
    Assignment,
    ItemReport,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
    StateItem,
    VersionAction,
    installed_version,
)

log = logging.getLogger("coordinator")
HEARTBEAT_FLUSH_SECONDS = 1.0
# How long this process trusts what it read of a credential. Writes of the machine, by this
# replica or (relayed) by another, forget its entry at once; the bound is for writes no
# replica relays (a CLI on the database). Several heartbeat intervals (10 s by default): at
# 10 s, every heartbeat found its entry just expired and read the store (issue 8).
CREDENTIAL_CACHE_SECONDS = 60.0
# A deposed leader waits this long before it campaigns again: the replicas that saw it go
# (they try every second) take over, rather than it winning back a lock it just lost.
STANDBY_SECONDS = 3.0
# A rollout is under way while its passes keep moving machines: a batch's next step follows
# its items, which take seconds to minutes (see Coordinator.rolling_out).
ROLLING_OUT_SECONDS = 30.0


@dataclass(frozen=True)
class AssignmentInputs:
    """What a machine's assignment is made of: its cluster, itself and the managers."""

    stored: StoredCluster
    machine: Machine
    peers: Sequence[Machine]


class Coordinator:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time,
                 credential_ttl: float | None = DEFAULT_CREDENTIAL_TTL_SECONDS) -> None:
        self.store = store
        self.clock = clock
        self.credential_ttl = credential_ttl  # None: machine credentials never expire
        self.access = Access(store, clock)
        self.notifier = Notifier()
        self._lock = store.mutex()  # spans every replica when the store is shared
        self.drainer = Drainer(self, clock)
        self._seen: dict[str, float] = {}  # heartbeats not written yet: machine id -> time
        self._flushing: list[dict[str, float]] = []  # heartbeats being written now
        # Machines written since the last pass: as this replica committed them (kept current
        # with the heartbeats flushed since), or None where the pass must read them again.
        self._changed: dict[str, Machine | None] = {}
        self._term: Term | None = None  # while this replica leads the reconcile loop
        self._views: dict[str, ClusterView] = {}  # what the last pass kept of each cluster
        # cluster -> (spec generation, machine id), as the last pass found
        self._post_deploy_hosts: dict[str, tuple[int, str | None]] = {}
        self._owners: dict[str, tuple[float, CredentialOwner]] = {}  # hash -> (read at, owner)
        self._owner_hashes: dict[str, str] = {}  # machine id -> its cached credential hash
        self._forgotten = 0  # grows on every forget: a read that raced one is not cached
        self._last_decision = -math.inf  # when a pass here last moved a machine
        self.notifier.on_written = self._written_elsewhere
        self._reports = GroupCommit(self._lock, self._write_reports,
                                    after=self._reconcile_after_reports)

    async def close(self) -> None:
        await self._reports.wait_idle()
        await self.drainer.close()
        await self.flush_heartbeats()

    async def _commit(self, machines: Sequence[Machine], events: Sequence[Event],
                      removed: Sequence[str] = ()) -> None:
        """Write machines (and events) and mark them changed for the next reconcile pass."""
        await self.store.commit(machines, events, removed)
        self._mark_written(removed, machines)

    def _mark_written(self, machine_ids: Sequence[str], machines: Sequence[Machine] = ()) -> None:
        """Machines just written (or heard from again): the next reconcile pass plans on them
        as written (machines) or reads them again (machine_ids), and no replica's credential
        cache keeps what it read of them."""
        self._changed.update(dict.fromkeys(machine_ids))
        self._changed.update((m.id, m) for m in machines)
        self._written_here(machine_ids, machines)

    def _written_here(self, machine_ids: Sequence[str], machines: Iterable[Machine]) -> None:
        """This replica just wrote these machines (ids: removed, or unknown how): keep
        authentication's cache as written, and tell the other replicas theirs is stale."""
        machines = list(machines)
        self._forget(machine_ids, machines)
        self.notifier.written([*machine_ids, *(m.id for m in machines)])

    def _written_elsewhere(self, machine_ids: Collection[str] | None) -> None:
        """Another replica wrote these machines (None: some, unknown which)."""
        self._post_deploy_hosts.clear()
        if machine_ids is None:
            self._views.clear()  # the next pass loads every cluster anew
            self._forget(list(self._owner_hashes))
            return
        self._changed.update(dict.fromkeys(machine_ids))
        self._forget(machine_ids)

    def _forget(self, machine_ids: Iterable[str], written: Iterable[Machine] = ()) -> None:
        """Drop what authentication cached of the machines just written (machine_ids), or
        keep it as written here (written): an item report, say, then costs the agent's next
        request no read, and a revoked or replaced credential still takes effect at once."""
        self._forgotten += 1
        written = list(written)
        replaced = [m.id for m in written if self._owner_hashes.get(m.id, m.credential_hash)
                    != m.credential_hash]  # a new or revoked credential
        for machine_id in [*machine_ids, *replaced]:
            digest = self._owner_hashes.pop(machine_id, None)
            if digest is not None:
                self._owners.pop(digest, None)
        for machine in written:  # what is still cached has the credential it was read with
            cached = self._owners.get(self._owner_hashes.get(machine.id, ""))
            if cached is None:
                continue
            self._owners[machine.credential_hash] = (cached[0], CredentialOwner(
                machine_id=machine.id, cluster=machine.cluster, hostname=machine.hostname,
                expires_at=machine.credential_expires_at, responding=machine.responding))

    # -- clusters ---------------------------------------------------------------
    async def apply_cluster(self, spec: ClusterSpec) -> tuple[StoredCluster, bool]:
        """Store the spec; returns it and whether it changed. Agents re-fetch on a change."""
        async with self._lock:
            before = await self.store.get_cluster(spec.name)
            if before is not None and before.deleting:
                raise Conflict(f"cluster {spec.name} is being deleted")
            stored = await self.store.put_cluster(spec, self.clock())
            changed = before is None or before.generation != stored.generation
            if changed:
                machines = [replace(m, generation=m.generation + 1)
                            for m in await self.store.list_machines(spec.name)]
                verb = "created" if before is None else "updated"
                await self._commit(machines, [self._event(
                    spec.name, "cluster-applied",
                    f"cluster {verb}: release {spec.release}, generation {stored.generation}",
                    data={"release": spec.release, "generation": stored.generation},
                )])
                self.notifier.wake(m.id for m in machines)
        self.kick()
        return stored, changed

    async def cluster(self, name: str) -> StoredCluster:
        stored = await self.store.get_cluster(name)
        if stored is None:
            raise NotFound(f"no cluster named {name}")
        return stored

    async def delete_cluster(self, name: str) -> None:
        """Every machine runs its reset items and goes; then the cluster goes."""
        await self.cluster(name)
        await self.store.mark_cluster_deleting(name)
        for machine in await self.store.list_machines(name):
            await self.delete_machine(machine.id)
        self.kick()

    async def create_join_token(self, cluster: str, ttl: float | None,
                                max_uses: int | None) -> tuple[str, JoinToken]:
        await self.cluster(cluster)
        return await self.access.create_join_token(cluster, ttl, max_uses)

    # -- agents -------------------------------------------------------------------
    async def register(self, request: RegisterRequest) -> RegisterResponse:
        cluster = await self.access.consume_join_token(request.join_token)
        stored = await self.cluster(cluster)
        settings = stored.spec.settings
        credential = new_token("machine")
        now = self.clock()
        expires = self._credential_expiry(now)
        async with self._lock:
            existing = next(iter(await self.store.machines_by_hostname(request.hostname,
                                                                       cluster)), None)
            if existing is not None and existing.approved:
                # A join token must never let a second node take over an admitted one.
                raise Conflict(f"{request.hostname} is already a member of {cluster} "
                               f"({existing.state.value}); delete it first to register anew")
            precheck = request.precheck.model_dump(mode="json", by_alias=True)
            if existing is not None:
                machine = replace(existing, ip=request.ip, facts=request.facts, precheck=precheck,
                                  credential_hash=token_hash(credential),
                                  credential_expires_at=expires, last_seen=now,
                                  responding=True, generation=existing.generation + 1)
                message = f"{request.hostname} registered again; its credential was replaced"
            else:
                machine = Machine(
                    id=str(uuid.uuid4()), cluster=cluster, hostname=request.hostname,
                    ip=request.ip, facts=request.facts, precheck=precheck,
                    created_at=now, state_since=now, last_seen=now,
                    credential_hash=token_hash(credential), credential_expires_at=expires,
                )
                if settings.auto_approve and not machine.precheck_failures():
                    machine = replace(machine, approved=True, role=settings.auto_approve_role)
                message = f"{request.hostname} registered from {request.ip}"
            failures = machine.precheck_failures()
            if failures:
                message += "; hard prechecks failed: " + "; ".join(failures)
            events = [self._event(cluster, "registered", message, machine,
                                  {"precheck_failures": failures})]
            if machine.approved and existing is None:
                events.append(self._event(cluster, "approved", "auto-approved", machine,
                                          {"role": machine.role}))
            await self._commit([machine], events)
        self.notifier.changed()
        self.kick()
        return RegisterResponse(machine_id=machine.id, credential=credential,
                                credential_expires_at=expires)

    def _credential_expiry(self, now: float) -> float | None:
        return now + self.credential_ttl if self.credential_ttl else None

    async def rotate_credential(self, machine_id: str, credential: str) -> float | None:
        """Replace a machine's credential with one its agent chose (and saved before asking,
        so a lost answer never locks it out). Returns the new expiry."""
        if len(credential) < 32:
            raise Conflict("a new credential must be at least 32 characters")
        async with self._lock:
            machine = await self._machine(machine_id)
            expires = self._credential_expiry(self.clock())
            updated = replace(machine, credential_hash=token_hash(credential),
                              credential_expires_at=expires)
            await self._commit([updated], [self._event(
                machine.cluster, "credential", f"{machine.hostname} rotated its credential",
                updated, {"expires_at": expires})])
        return expires

    async def revoke_credential(self, machine_id: str) -> Machine:
        """The machine stays listed, but its agent is refused until it is deleted and joins
        again."""
        async with self._lock:
            machine = await self._machine(machine_id)
            updated = replace(machine, credential_hash="", credential_expires_at=None)
            await self._commit([updated], [self._event(
                machine.cluster, "credential", f"{machine.hostname}: credential revoked",
                updated)])
        self.notifier.wake([machine.id])
        return updated

    async def update_precheck(self, machine_id: str, report: PrecheckReport) -> Machine:
        """A Pending machine re-ran its prechecks (e.g. after the operator fixed something)."""
        async with self._lock:
            machine = await self._machine(machine_id)
            if machine.state is not MachineState.PENDING:
                raise Conflict(f"{machine.hostname} is {machine.state.value}: prechecks only "
                               "matter before approval")
            updated = replace(machine, precheck=report.model_dump(mode="json", by_alias=True),
                              generation=machine.generation + 1)
            failures = updated.precheck_failures()
            message = (f"{machine.hostname} prechecks now pass" if not failures else
                       f"{machine.hostname} prechecks still fail: " + "; ".join(failures))
            await self._commit([updated], [self._event(
                machine.cluster, "precheck", message, updated, {"precheck_failures": failures})])
        self.notifier.changed()
        self.kick()
        return updated

    async def authenticate_any(self, credential: str) -> CredentialOwner:
        """Every agent request starts here: what was read is kept CREDENTIAL_CACHE_SECONDS,
        so that a heartbeat costs no database read."""
        digest, now = token_hash(credential), self.clock()
        cached = self._owners.get(digest)
        if cached is not None and now - cached[0] <= CREDENTIAL_CACHE_SECONDS:
            owner: CredentialOwner | None = cached[1]
        else:
            forgotten = self._forgotten
            owner = await self.store.credential_owner(digest)
            if owner is not None and forgotten == self._forgotten:
                self._owners[digest] = (now, owner)
                self._owner_hashes[owner.machine_id] = digest
        if owner is None:
            raise Unauthorized("unknown or revoked machine credential")
        if owner.expires_at is not None and self.clock() >= owner.expires_at:
            raise Unauthorized(f"the credential of {owner.hostname} expired: delete the "
                               "machine and let it join again")
        return owner

    async def authenticate(self, machine_id: str, credential: str) -> CredentialOwner:
        """The machine the credential belongs to, which must be the one the request names."""
        owner = await self.authenticate_any(credential)
        if owner.machine_id != machine_id:
            raise Unauthorized("this credential belongs to another machine")
        return owner

    async def assignment(self, machine: Machine) -> Assignment:
        stored = await self.cluster(machine.cluster)
        peers = await self.store.list_machines(machine.cluster, role="manager")
        return await self._assignment(AssignmentInputs(stored, machine, peers))

    async def _assignment(self, inputs: AssignmentInputs) -> Assignment:
        stored, machine, peers = inputs.stored, inputs.machine, inputs.peers
        spec = stored.spec
        phase = PHASE_OF_STATE.get(machine.state) if machine.role else None
        if machine.state is MachineState.UPGRADE and not upgrade_items_may_run(spec, machine):
            phase = None  # the node is being drained: its upgrade items wait
        if machine.state is MachineState.READY and machine.role == "manager" and \
                await self._post_deploy_host(stored) == machine.id:
            phase = "postdeploy"
        items = (phase_items(spec, machine.role, phase, deployed_managers(peers))
                 if machine.role and phase else [])
        return Assignment(
            machine_id=machine.id,
            generation=machine.generation,
            state=machine.state.value,
            phase=phase,
            items=items,
            applied=sorted(machine.applied),
            values=template_values(spec, machine, peers),
            retry=spec.settings.retry,
            proxy=spec.settings.proxy,
            ntp=spec.settings.ntp,
        )

    async def _post_deploy_host(self, stored: StoredCluster) -> str | None:
        """The id of the manager to run the post-deploy step: as the last reconcile pass found
        for this spec (it wakes that manager when it changes), or else from the whole cluster.
        A post-deploy report, a write by another replica or a new spec makes the pass's
        answer stale: the items it named may be done, or be others now."""
        cached = self._post_deploy_hosts.get(stored.spec.name)
        if cached is not None and cached[0] == stored.generation:
            return cached[1]
        host = planner.post_deploy_host(stored.spec,
                                        await self.store.list_machines(stored.spec.name))
        return host.id if host else None

    async def current_assignment(self, machine_id: str) -> Assignment:
        return await self.assignment(await self._machine(machine_id))

    async def wait_assignment(self, machine_id: str, after: int,
                              timeout: float) -> Assignment | None:
        """Long-poll: the assignment as soon as the machine's generation passes `after`; None
        when the wait ran out with nothing written to the machine and its generation is
        `after`: the caller has this assignment already, and answering without reading it
        again is most of what a fleet's idle polls cost (issue 8)."""
        woken = self.notifier.subscribe(machine_id)
        generation = await self.store.machine_generation(machine_id)  # not decoded (issue 8)
        if generation is None:
            raise NotFound(f"no machine {machine_id}")
        if generation <= after:
            try:
                async with asyncio.timeout(timeout):  # no task of its own, unlike wait_for
                    await woken.wait()
            except TimeoutError:
                if generation == after:
                    return None
            news = woken.news
            if isinstance(news, AssignmentInputs) and news.machine.generation > after:
                return await self._assignment(news)  # what the pass that woke it wrote
        return await self.current_assignment(machine_id)

    async def report(self, machine_id: str, report: ItemReport) -> None:
        """Record an item report; returns once it is durable. Reports arriving while others
        are being written are written together (group commit: one lock, one transaction,
        one fsync for the lot), each refused or accepted on its own."""
        await self._reports.submit((machine_id, report))

    async def _write_reports(self, batch: list[Pending[tuple[str, ItemReport]]]) -> None:
        """Apply the reports in arrival order (a machine's second report on top of its
        first) and commit them in one transaction; a report that does not fit (unknown
        machine or item, bad kubeconfig) is refused alone and changes nothing. Runs under
        self._lock (taken by the group commit)."""
        machines = {m.id: m for m in await self.store.get_machines(
            {p.request[0] for p in batch})}
        known: dict[str, tuple[ClusterSpec, dict[str, StateItem]]] = {}
        updated: dict[str, Machine] = {}
        events: list[Event] = []
        accepted: list[tuple[Machine, ItemReport]] = []
        for pending in batch:
            machine_id, report = pending.request
            try:
                machine = machines.get(machine_id)
                if machine is None:
                    raise NotFound(f"no machine {machine_id}")
                if machine.cluster not in known:
                    known[machine.cluster] = await self._reportable_items(machine.cluster)
                spec, items = known[machine.cluster]
                machine, reported = self._reported(spec, items, machine, report)
            except Exception as exc:  # this caller's answer, not the batch's
                pending.fail(exc)
                continue
            machines[machine.id] = updated[machine.id] = machine
            events += reported
            accepted.append((machine, report))
        if not accepted:
            return
        await self._commit(list(updated.values()), events)
        for machine, report in accepted:
            if report.phase == "postdeploy":
                self._post_deploy_hosts.pop(machine.cluster, None)
        self.notifier.changed()
        if any(report.status == "succeeded" for _, report in accepted):
            self.kick()

    async def _reportable_items(self, cluster: str) -> tuple[ClusterSpec, dict[str, StateItem]]:
        """The cluster's spec and every item a report may name, by fingerprint."""
        spec = (await self.cluster(cluster)).spec
        managers = deployed_managers(await self.store.list_machines(cluster, role="manager"))
        return spec, {i.fingerprint(): i for role in ROLES
                      for i in [*getattr(spec.machine_types, role),
                                *phase_items(spec, role, "reconfigure", managers),
                                *phase_items(spec, role, "postdeploy")]}

    def _reported(self, spec: ClusterSpec, items: dict[str, StateItem], machine: Machine,
                  report: ItemReport) -> tuple[Machine, list[Event]]:
        """The machine once report is in, and the events saying so."""
        item = items.get(report.fingerprint)
        if item is None:
            raise Conflict(f"item {report.item} ({report.fingerprint}) is not in the cluster spec")
        now = self.clock()
        applied = machine.applied
        if report.status == "succeeded":
            applied = applied | {report.fingerprint}
        kubeconfig, events = self._reported_kubeconfig(machine, item, report)
        updated = replace(
            machine, applied=applied, last_seen=now, responding=True, kubeconfig=kubeconfig,
            progress=ItemProgress(item=report.item, attempt=report.attempt, status=report.status,
                              error=report.error, next_retry_at=report.next_retry_at,
                              updated_at=now,
                              failing_since=_failing_since(machine.progress, report, now)),
        )
        event = self._event(machine.cluster, "item", _describe(report), updated, {
            "item": report.item, "phase": report.phase, "status": report.status,
            "attempt": report.attempt, "exit_code": report.exit_code,
            "duration": (report.finished_at - report.started_at)
            if report.finished_at else None,
            "error": report.error, "output": report.output,
        })
        return updated, [event, *events, *self._post_deploy_check(spec, updated, item, report)]

    def _reported_kubeconfig(self, machine: Machine, item: StateItem,
                             report: ItemReport) -> tuple[str, list[Event]]:
        """The kubeconfig the machine holds once this report is in, and the event saying it
        changed. The kubeconfig itself goes into no event: only who sent it, from where."""
        if report.kubeconfig is None:
            return machine.kubeconfig, []
        if item.kubeconfig_from is None or machine.role != "manager" or report.status != "succeeded":
            raise Conflict(f"kubeconfig: item {item.name} is not a manager item with kubeconfigFrom "
                           "that succeeded: its report cannot carry one")
        problem = kubeconfig_problem(report.kubeconfig)
        if problem is not None:
            return machine.kubeconfig, [self._event(
                machine.cluster, "kubeconfig", f"{machine.hostname}: the kubeconfig item "
                f"{item.name} left in {item.kubeconfig_from} is not usable: {problem}", machine)]
        if report.kubeconfig == machine.kubeconfig:
            return machine.kubeconfig, []
        return report.kubeconfig, [self._event(
            machine.cluster, "kubeconfig", f"{machine.hostname} reported a kubeconfig (item "
            f"{item.name}, {item.kubeconfig_from}): drains use the first manager's unless "
            "settings.kubernetes.kubeconfig is set", machine, {"item": item.name})]

    def _post_deploy_check(self, spec: ClusterSpec, machine: Machine, item: StateItem,
                           report: ItemReport) -> list[Event]:
        """A post-deploy version check's outcome, as its own event: verified, or which version
        is installed instead of the declared one (the agent retries until they match)."""
        action = item.action
        if not isinstance(action, VersionAction) or report.status == "running":
            return []
        if report.status == "succeeded":
            message = (f"post-deploy step verified on {machine.hostname} at release "
                       f"{spec.release}: {item.name.removesuffix('.version')} {action.expect}")
        else:
            message = (f"post-deploy check {item.name} failed on {machine.hostname} at release "
                       f"{spec.release} (attempt {report.attempt}): {report.error}")
        return [self._event(machine.cluster, "post-deploy", message, machine, {
            "item": item.name, "declared": action.expect, "release": spec.release,
            "verified": report.status == "succeeded",
            "installed": installed_version(report.output) if report.exit_code is not None else None})]

    async def heartbeat(self, machine: CredentialOwner) -> None:
        """Kept in memory until the next flush_heartbeats: a durable write per heartbeat
        would cap the fleet at the disk's fsync rate."""
        now = self.clock()
        self._seen[machine.machine_id] = max(now, self._seen.get(machine.machine_id, now))
        if not machine.responding:
            self._mark_written([machine.machine_id])
            self.kick()  # the reconciler records that it answers again

    async def flush_heartbeats(self) -> None:
        """Write the heartbeats received since the last flush, in one transaction."""
        seen, self._seen = self._seen, {}
        if not seen:
            return
        self._flushing.append(seen)
        try:
            await self.store.touch_machines(seen)
        except BaseException:
            for machine_id, when in seen.items():  # kept for the next flush
                self._seen[machine_id] = max(when, self._seen.get(machine_id, when))
            raise
        finally:
            self._flushing.remove(seen)
        for machine_id, when in seen.items():  # the written copies stay what the store holds
            written = self._changed.get(machine_id)
            if written is not None and written.last_seen < when:
                self._changed[machine_id] = replace(written, last_seen=when)

    async def write_heartbeats(self, interval: float = HEARTBEAT_FLUSH_SECONDS) -> None:
        """Flush heartbeats every interval seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush_heartbeats()
            except Exception:  # e.g. the database is locked for a while: the next flush retries
                log.exception("writing heartbeats failed")

    # -- admin ----------------------------------------------------------------------
    async def approve(self, machine_id: str, role: Role | None = None) -> Machine:
        async with self._lock:
            machine = await self._machine(machine_id)
            failures = machine.precheck_failures()
            if failures:
                raise Conflict(f"{machine.hostname} cannot be approved: hard prechecks failed: "
                               + "; ".join(failures))
            if machine.state is not MachineState.PENDING:
                raise Conflict(f"{machine.hostname} is {machine.state.value}, not Pending")
            updated = replace(machine, approved=True, role=role or machine.role)
            note = f" as {updated.role}" if updated.role else " (no role yet: set one to start)"
            await self._commit([updated], [self._event(
                machine.cluster, "approved", f"{machine.hostname} approved{note}", updated,
                {"role": updated.role})])
        self.notifier.changed()
        self.kick()
        return updated

    async def set_role(self, machine_id: str, role: Role) -> Machine:
        async with self._lock:
            machine = await self._machine(machine_id)
            if machine.state is not MachineState.PENDING:
                raise Conflict(f"{machine.hostname} is {machine.state.value}: its role is fixed "
                               "once it left Pending")
            updated = replace(machine, role=role)
            await self._commit([updated], [self._event(
                machine.cluster, "role", f"{machine.hostname} role set to {role}", updated,
                {"role": role})])
        self.notifier.changed()
        self.kick()
        return updated

    async def delete_machine(self, machine_id: str, force: bool = False) -> Machine | None:
        """Machines that never ran items, or with force, go at once; the others run their
        reset items first (state Deleting). Returns the machine unless it is gone."""
        async with self._lock:
            machine = await self._machine(machine_id)
            never_started = machine.state is MachineState.PENDING
            if force or never_started or machine.role is None:
                await self._commit([], [self._event(
                    machine.cluster, "removed",
                    f"{machine.hostname} removed" + (" without reset (forced)" if force else ""),
                    machine)], removed=[machine.id])
                self.notifier.wake([machine.id])
                return None
            updated = machine.with_state(MachineState.DELETING, self.clock())
            await self._commit([updated], [self._event(
                machine.cluster, "state",
                f"{machine.hostname} {machine.state.value} -> Deleting: running reset items",
                updated, {"from": machine.state.value, "to": "Deleting"})])
            self.notifier.wake([machine.id])
        self.kick()
        return updated

    async def set_paused(self, name: str, paused: bool) -> StoredCluster:
        """Pause or resume upgrades: the spec's settings.upgrade.paused (a later apply of a
        file sets it to what the file says, as with a Deployment's spec.paused)."""
        spec = (await self.cluster(name)).spec
        settings = spec.settings.model_copy(update={
            "upgrade": spec.settings.upgrade.model_copy(update={"paused": paused})})
        stored, changed = await self.apply_cluster(spec.model_copy(update={"settings": settings}))
        if changed:
            await self.store.commit([], [self._event(
                name, "upgrade", "upgrade " + ("paused: no machine starts upgrading"
                                               if paused else "resumed"))])
        return stored

    async def upgrade_plan(self, name: str, spec: ClusterSpec | None = None) -> planner.UpgradePlan:
        """The steps an upgrade to spec (default: the stored one) would take; changes nothing."""
        stored = await self.cluster(name)
        if spec is not None and spec.name != name:
            raise Conflict(f"the spec is for cluster {spec.name}, not {name}")
        return planner.upgrade_plan(spec or stored.spec, await self.store.list_machines(name))

    async def drain_action(self, machine_id: str, action: str) -> Machine:
        """The operator's answer to a drain: retry (a new attempt and timeout), skip (run the
        upgrade items with what is left on the node) or force (delete budget-protected pods)."""
        await self.drainer.cancel(machine_id)
        async with self._lock:
            machine = await self._machine(machine_id)
            stored = await self.cluster(machine.cluster)
            if machine.state is not MachineState.UPGRADE or not needs_drain(stored.spec, machine):
                raise Conflict(f"{machine.hostname} is {machine.state.value}: it has no drain to "
                               f"{action}")
            current = machine.drain or DrainStatus(DrainStage.DRAINING, self.clock(), attempt=0)
            if current.stage not in (DrainStage.DRAINING, DrainStage.BLOCKED):
                raise Conflict(f"{machine.hostname}: its drain is {current.stage.value}, nothing "
                               f"to {action}")
            if action == "skip":
                status = replace(current, stage=DrainStage.SKIPPED, message=(
                    "drain skipped by the operator; upgrading with "
                    f"{len(current.blocking_pods)} pods left on the node"))
            else:
                status = DrainStatus(DrainStage.DRAINING, self.clock(), current.attempt + 1,
                                     force=action == "force")
            updated = replace(machine, drain=status, generation=machine.generation + 1)
            await self._commit([updated], [self._event(
                machine.cluster, "drain", f"{machine.hostname}: operator chose {action} "
                f"(drain attempt {status.attempt})", updated, {"action": action})])
            self.notifier.wake([machine.id])
        self.kick()
        return updated

    async def set_drain(self, machine_id: str, expected: DrainStatus | None, status: DrainStatus,
                        message: str | None) -> bool:
        """The drainer's write: only while the machine is in Upgrade with the drain attempt the
        caller ran (None: no drain yet). Events only for messages; the agent is woken when its
        upgrade items may now run."""
        async with self._lock:
            machine = await self.store.get_machine(machine_id)
            if machine is None or machine.state is not MachineState.UPGRADE:
                return False
            now = machine.drain
            if (now is None) != (expected is None) or (now is not None and expected is not None and (
                    now.attempt, now.started_at) != (expected.attempt, expected.started_at)):
                return False
            stored = await self.cluster(machine.cluster)
            before = upgrade_items_may_run(stored.spec, machine)
            updated = replace(machine, drain=status)
            if upgrade_items_may_run(stored.spec, updated) != before:
                updated = replace(updated, generation=machine.generation + 1)
            events = [] if message is None else [self._event(
                machine.cluster, "drain", message, updated,
                {"stage": status.stage.value, "blocking_pods": list(status.blocking_pods),
                 "blocking_budgets": list(status.blocking_budgets), "evicted": status.evicted})]
            await self._commit([updated], events)
            self.notifier.wake([machine.id])
        self.kick()
        return True

    async def machine(self, ref: str) -> Machine:
        """A machine by id or hostname (hostnames are unique within a cluster)."""
        machine = await self.store.get_machine(ref)
        if machine is not None:
            return machine
        matches = await self.store.machines_by_hostname(ref)
        if len(matches) > 1:
            raise Conflict(f"hostname {ref} exists in several clusters: use the machine id")
        if not matches:
            raise NotFound(f"no machine with id or hostname {ref}")
        return matches[0]

    # -- reconcile ----------------------------------------------------------------------
    def kick(self) -> None:
        self.notifier.kick()

    async def reconcile_once(self) -> list[planner.Decision]:
        """Load what changed, plan, persist, wake. Safe to repeat or to interrupt at any await:
        a pass that fails drops what passes keep, and the next one loads every cluster anew."""
        async with self._lock:
            return await self._reconcile_locked()

    async def _reconcile_locked(self) -> list[planner.Decision]:
        """reconcile_once, with the lock already held."""
        decided: list[planner.Decision] = []
        try:
            changed, self._changed = self._changed, {}
            unknown = [i for i, m in changed.items() if m is None]
            reloaded = [m for m in changed.values() if m is not None]
            reloaded += await self.store.get_machines(unknown) if unknown else []
            gone = set(unknown) - {m.id for m in reloaded}
            clusters = await self.store.list_clusters()
            for stored in clusters:
                decided += await self._reconcile_cluster(stored, reloaded, gone)
        except BaseException:
            self._views.clear()
            raise
        for name in set(self._views) - {c.spec.name for c in clusters}:
            del self._views[name]
        if decided:
            self._last_decision = self.clock()
        return decided

    def rolling_out(self) -> bool:
        """Whether a pass here moved a machine within ROLLING_OUT_SECONDS: the next step of a
        rollout may be due any moment, and what would pause the process had better wait."""
        return self.clock() - self._last_decision < ROLLING_OUT_SECONDS

    async def _reconcile_after_reports(self) -> None:
        """Right after a batch of reports, still under the lock: when one asked for a pass
        (an item succeeded) and this replica leads, plan now rather than let the reconcile
        loop queue for the lock behind the next batch: the next worker of a rollout is
        admitted as soon as the one before it is recorded done."""
        term = self._term
        if term is None or term.lost.is_set() or not self.notifier.kicked.is_set():
            return
        self.notifier.kicked.clear()
        epoch = leader_epoch.set(term.epoch)  # the store fences it as it fences the loop
        try:
            await self._reconcile_locked()
        except Exception:  # the reports are recorded; the loop tries again
            log.exception("reconcile pass failed")
            self.kick()
        finally:
            leader_epoch.reset(epoch)

    async def _reconcile_cluster(self, stored: StoredCluster, reloaded: Sequence[Machine],
                                 gone: set[str]) -> list[planner.Decision]:
        spec = stored.spec
        now = self.clock()
        cutoff = now - spec.settings.heartbeat_timeout_seconds
        changed: dict[str, Machine] = {}
        events: list[Event] = []
        view = self._views.pop(spec.name, None)
        loaded: list[Machine] = []
        current = view is not None and view.generation == stored.generation and not stored.deleting
        if view is not None and current:
            known = {m.id for m in reloaded}
            silent = [i for i in await self.store.machines_last_seen_between(
                spec.name, view.checked_until, cutoff) if i not in known]
            loaded = [m for m in reloaded if m.cluster == spec.name]
            loaded += await self.store.get_machines(silent) if silent else []
            loaded = self._check_responding(spec, loaded, now, changed, events)
            view.checked_until = max(view.checked_until, cutoff)
        if view is None or not current or not view.update(loaded, gone):
            have = {m.id for m in loaded}  # a manager change: the rest of the cluster too
            rest = [m for m in await self.store.list_machines(spec.name) if m.id not in have]
            loaded += self._check_responding(spec, rest, now, changed, events)
            view = ClusterView.load(spec, stored.generation, loaded, cutoff)
        if (stand_in := view.missing_stand_in()) is not None:
            view.update(self._check_responding(spec, await self.store.get_machines([stand_in]),
                                               now, changed, events))
        machines = view.working()
        after, decisions = planner.plan_to_fixpoint(spec, machines, now)
        by_id = {m.id: m for m in after}
        events += [self._event(spec.name, "state",
                               f"{d.hostname} {d.from_state.value} -> "
                               f"{d.to_state.value if d.to_state else 'removed'}: {d.reason}",
                               by_id.get(d.machine_id),
                               {"from": d.from_state.value,
                                "to": d.to_state.value if d.to_state else None,
                                "reason": d.reason},
                               machine_id=d.machine_id, hostname=d.hostname)
                   for d in decisions]
        before = {m.id: m for m in machines}
        changed.update({m.id: m for m in after if m != before.get(m.id)})
        events += self._post_deploy(spec, machines, after, decisions, changed)
        host = planner.post_deploy_host(spec, after)
        self._post_deploy_hosts[spec.name] = (stored.generation, host.id if host else None)
        removed = [d.machine_id for d in decisions if d.to_state is None]
        if changed or events or removed:
            await self.store.commit(list(changed.values()), events, removed)
            self._written_here(removed, changed.values())
            self.notifier.wake([*changed, *removed],
                               await self._assignment_news(stored, changed.values()))
        self.drainer.schedule(spec, [changed.get(m.id, m) for m in after])
        if view.update(list(changed.values()), removed):
            self._views[spec.name] = view
        else:
            self.kick()  # the deployed managers changed: the next pass loads the whole cluster
        if stored.deleting and not after and not await self.store.list_machines(spec.name):
            await self.store.remove_cluster(spec.name)
            await self.store.commit([], [self._event(spec.name, "cluster-removed",
                                                     f"cluster {spec.name} removed")])
            self._views.pop(spec.name, None)
            self._post_deploy_hosts.pop(spec.name, None)
            self.notifier.changed()
        return decisions

    async def _assignment_news(self, stored: StoredCluster,
                               written: Iterable[Machine]) -> dict[str, AssignmentInputs]:
        """For the machines a pass wrote whose agents are waiting: what their assignments are
        made of, read once for all of them (their long-polls would each read it again)."""
        waiting = [m for m in written if self.notifier.waiting(m.id)]
        if not waiting:
            return {}
        peers = await self.store.list_machines(stored.spec.name, role="manager")
        return {m.id: AssignmentInputs(stored, m, peers) for m in waiting}

    def _last_heard(self, machine: Machine) -> float:
        """When the machine was last heard from, counting heartbeats not written yet: a pass
        need not write them first (a durable write on every pass)."""
        return max(machine.last_seen, self._seen.get(machine.id, 0.0),
                   *(seen.get(machine.id, 0.0) for seen in self._flushing))

    def _check_responding(self, spec: ClusterSpec, machines: Sequence[Machine], now: float,
                          changed: dict[str, Machine], events: list[Event]) -> list[Machine]:
        """The machines with `responding` as their last heartbeat says now; the ones that
        changed go into changed, with an event each."""
        checked = []
        for machine in machines:
            silent = now - self._last_heard(machine)
            responding = silent <= spec.settings.heartbeat_timeout_seconds
            if responding != machine.responding:
                events.append(self._event(
                    spec.name, "responding" if responding else "not-responding",
                    f"{machine.hostname} " + ("answers again" if responding else
                    f"missed heartbeats for {silent:.0f}s"), machine))
                machine = changed[machine.id] = replace(machine, responding=responding)
            checked.append(machine)
        return checked

    def _post_deploy(self, spec: ClusterSpec, before: Sequence[Machine], after: Sequence[Machine],
                     decisions: Sequence[planner.Decision], changed: dict[str, Machine]) -> list[Event]:
        """Wake the manager that is to run the post-deploy step when it becomes due, and say
        after an upgrade whether the step's version was already in place."""
        host = planner.post_deploy_host(spec, after)
        previous = planner.post_deploy_host(spec, before)
        events = []
        if host is not None and (previous is None or previous.id != host.id):
            machine = changed.get(host.id, host)
            changed[host.id] = replace(machine, generation=machine.generation + 1)
            events.append(self._event(spec.name, "post-deploy",
                                      f"post-deploy step runs on {host.hostname}", host))
        upgraded = any(d.from_state is MachineState.UPGRADE for d in decisions)
        if upgraded and host is None and spec.items("manager", "postdeploy") \
                and planner.upgrade_settled(spec, after):
            events.append(self._event(spec.name, "post-deploy",
                                      f"upgrade to {spec.release} done; the post-deploy items at "
                                      "this version were already applied (none has a "
                                      "versionCommand to check what is installed)"))
        return events

    async def run(self, tick: float = 1.0) -> None:
        """Relay wake-ups to and from the other replicas (if any), and reconcile whenever this
        replica leads: from its election until its term is lost, when reconciling and draining
        stop at once (and the store fences any write still on its way)."""
        await self.share()
        while True:
            term = await self.store.campaign()
            if term.epoch is not None:
                log.info("leading the reconcile loop (leader epoch %d)", term.epoch)
            self._term = term
            epoch = leader_epoch.set(term.epoch)
            try:
                work = asyncio.create_task(self._reconcile_loop(tick))  # inherits the epoch
            finally:
                leader_epoch.reset(epoch)
            lost = asyncio.create_task(term.lost.wait())
            try:
                await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._term = None
                for task in (work, lost):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await self.drainer.close()
            log.warning("lost leadership (leader epoch %s): standing by", term.epoch)
            await asyncio.sleep(STANDBY_SECONDS)

    async def share(self) -> None:
        """With replicas sharing the store: their wakes, changes and kicks reach this one's
        agents, watchers and reconcile loop, and this one's reach theirs."""
        if await self.store.listen(self.notifier.deliver):
            self.notifier.relay(self.store.publish)

    async def _reconcile_loop(self, tick: float) -> None:
        """A pass on every kick, and at least every tick seconds."""
        while True:
            try:
                await asyncio.wait_for(self.notifier.kicked.wait(), tick)
            except TimeoutError:
                pass
            else:
                if not self.notifier.kicked.is_set():
                    continue  # a pass after a batch of reports took the kick meanwhile
            self.notifier.kicked.clear()
            try:
                await self.reconcile_once()
            except Exception:  # a bad pass must not stop the loop; the next one retries
                log.exception("reconcile pass failed")
                await asyncio.sleep(tick)

    async def audit(self, actor: str, method: str, path: str, status: int,
                    cluster: str = "") -> None:
        """Record an admin change: who, what, when (the event's time)."""
        await self.store.commit([], [self._event(
            cluster, "audit", f"{actor}: {method} {path} -> {status}",
            data={"actor": actor, "method": method, "path": path, "status": status})])

    # -- helpers ----------------------------------------------------------------------
    async def _machine(self, machine_id: str) -> Machine:
        machine = await self.store.get_machine(machine_id)
        if machine is None:
            raise NotFound(f"no machine {machine_id}")
        return machine

    def _event(self, cluster: str, kind: str, message: str, machine: Machine | None = None,
               data: dict | None = None, machine_id: str | None = None,
               hostname: str | None = None) -> Event:
        return Event(
            time=self.clock(), cluster=cluster, kind=kind, message=message,
            machine=machine.id if machine else machine_id,
            hostname=machine.hostname if machine else hostname, data=data or {},
        )


def _failing_since(before: ItemProgress | None, report: ItemReport, now: float) -> float | None:
    """When the item began failing: kept while it fails again (retries, or "running" between
    them), cleared by its success or by another item."""
    if report.status == "succeeded" or before is None or before.item != report.item:
        return now if report.status == "failed" else None
    if before.failing_since is not None:
        return before.failing_since
    return now if report.status == "failed" else None


def _describe(report: ItemReport) -> str:
    text = f"{report.phase} item {report.item} {report.status} (attempt {report.attempt})"
    if report.status == "failed" and report.error:
        text += f": {report.error}"
    return text


def template_values(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine]) -> dict[str, str]:
    """Values StateItem templates may use: ${cluster.name}, ${machine.ip}, ${managers}, ...
    The cluster's NTP and proxy settings are among them, for items that configure chrony,
    containerd or the kubelet."""
    managers = sorted((m for m in peers if m.role == "manager" and m.approved
                       and m.state is not MachineState.DELETING),
                      key=lambda m: (m.created_at, m.hostname, m.id))
    deployed = [m for m in managers if m.state in
                (MachineState.READY, MachineState.UPGRADE, MachineState.RECONFIGURE)]
    first = (deployed or managers or [None])[0]
    return {
        "cluster.name": spec.name,
        "cluster.release": spec.release,
        "machine.id": machine.id,
        "machine.hostname": machine.hostname,
        "machine.ip": machine.ip or "",
        "machine.role": machine.role or "",
        "managers": ",".join(m.ip or m.hostname for m in managers),
        "managers.hostnames": ",".join(m.hostname for m in managers),
        "managers.first": (first.ip or first.hostname) if first else "",
        "ntp.servers": ",".join(spec.settings.ntp.servers),
        "ntp.maxSkewSeconds": f"{spec.settings.ntp.max_skew_seconds:g}",
        "proxy.http": spec.settings.proxy.http or "",
        "proxy.https": spec.settings.proxy.https or "",
        "proxy.noProxy": ",".join(spec.settings.proxy.no_proxy),
    }
