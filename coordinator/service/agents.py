"""What agents ask of the coordinator: to register, to rotate their credential, to update their
prechecks, their assignment (at once, or long-polled) and the recording of item reports.

Item reports are group-committed: all that queued behind the write lock go in one transaction,
each answered on its own once durable."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace

from coordinator.domain.assignments.assignment import (
    AssignmentInputs,
    build_assignment,
    may_host_post_deploy,
    pool_assignment,
)
from coordinator.domain.assignments.etags import Version, may_wait, not_modified
from coordinator.domain.assignments.reports import fold_report, refresh_kubeconfig
from coordinator.domain.changes import Change, combined
from coordinator.domain.errors import Unauthorized
from coordinator.domain.machines.approval import prechecked
from coordinator.domain.machines.pooling import in_pool, pool_prechecked
from coordinator.domain.machines.registration import Credential, registered, registered_before, rotated
from coordinator.domain.machines.reissue import rejoin_refusal, rejoined
from coordinator.domain.machines.tokens import new_token, token_hash
from coordinator.domain.model import POOL, ClusterSettings, ClusterSpec, Machine, deployed_managers
from coordinator.domain.specs.outputs import cluster_outputs
from coordinator.service.access import Access
from coordinator.service.groupcommit import GroupCommit, Pending
from coordinator.service.movetargets import MoveTargets
from coordinator.service.notifier import Notifier
from coordinator.service.postdeploy import PostDeployHosts
from coordinator.service.queries import Queries
from coordinator.service.versions import VersionCache
from coordinator.service.writes import Writes
from coordinator.store.base import TokenRefused
from nodeagent.wire.joinstring import reissued_machine
from nodeagent.wire.protocol import (
    Assignment,
    ItemReport,
    KubeconfigRefresh,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
)


class Agents:
    def __init__(self, writes: Writes, queries: Queries, access: Access, notifier: Notifier,
                 versions: VersionCache, post_deploy: PostDeployHosts, move_targets: MoveTargets,
                 clock: Callable[[], float],
                 credential_ttl: float | None, after_reports: Callable[[], Awaitable[None]]) -> None:
        self.writes = writes
        self.store = writes.store
        self.queries = queries
        self.access = access
        self.notifier = notifier
        self.versions = versions
        self.post_deploy = post_deploy
        self.move_targets = move_targets
        self.clock = clock
        self.credential_ttl = credential_ttl  # None: machine credentials never expire
        self._reports = GroupCommit(writes.lock, self._write_reports, after=after_reports)

    async def close(self) -> None:
        """Returns once every report submitted is answered."""
        await self._reports.wait_idle()

    def _credential(self, secret: str, now: float) -> Credential:
        return Credential(token_hash(secret),
                          now + self.credential_ttl if self.credential_ttl else None)

    async def register(self, request: RegisterRequest) -> RegisterResponse:
        """Register a machine with the credential its agent chose (or a new one). Safe to
        retry: a registration whose credential is already a machine's gets that machine again,
        and uses no join token; nor does one refused (e.g. its hostname is taken). Under the
        write lock, so that a retry sent while the first attempt is being written waits for
        it."""
        secret, now = request.credential or new_token("machine"), self.clock()
        credential = self._credential(secret, now)
        async with self.writes.lock:
            owner = await self.store.credential_owner(credential.hash)
            if owner is not None:
                return RegisterResponse(machine_id=registered_before(owner, request), credential=secret,
                                        credential_expires_at=owner.expires_at)
            rejoining = reissued_machine(request.join_token)
            if rejoining is not None:
                change = rejoined(await self._rejoining(rejoining, request, now), request,
                                  credential, now)
            else:
                token = await self.access.usable_join_token(request.join_token)
                cluster = token.cluster
                settings = ClusterSettings() if cluster == POOL else \
                    (await self.queries.cluster(cluster)).spec.settings
                existing = next(iter(await self.store.machines_by_hostname(request.hostname,
                                                                           cluster)), None)
                new_id = str(uuid.uuid4())
                clones = await self.queries.clones(
                    new_id, request.precheck.model_dump(mode="json", by_alias=True))
                change = registered(cluster, settings, existing, request, credential, new_id,
                                    now, clones, token.auto_approve)
            try:
                await self.writes.apply(change)
            except TokenRefused:
                raise await self.access.join_refused(request.join_token) from None
        self.writes.wake(change)
        return RegisterResponse(machine_id=change.machines[0].id, credential=secret,
                                credential_expires_at=credential.expires_at)

    async def _rejoining(self, machine_id: str, request: RegisterRequest, now: float) -> Machine:
        """The machine a reissue string is bound to (domain/machines/reissue.py); refused
        saying why when the string or the node is not the one it was issued for."""
        machine = await self.store.get_machine(machine_id)
        if machine is None:
            raise Unauthorized(f"this reissue string's machine is gone: "
                               f"{await self.queries.missing(machine_id)}")
        refused = rejoin_refusal(machine, token_hash(request.join_token), request.hostname, now)
        if refused is not None:
            raise refused
        return machine

    async def rotate_credential(self, machine_id: str, secret: str) -> float | None:
        """Replace a machine's credential with one its agent chose (and saved before asking,
        so a lost answer never locks it out). Returns the new expiry. A credential another
        machine holds is refused (registration.rotated)."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            credential = self._credential(secret, self.clock())
            owner = await self.store.credential_owner(credential.hash)
            change = rotated(machine, owner, credential, self.clock())
            await self.writes.apply(change)
        self.writes.wake(change)
        return credential.expires_at

    async def update_precheck(self, machine_id: str, report: PrecheckReport) -> Machine:
        """A Pending machine re-ran its prechecks (e.g. after the operator fixed something);
        auto-approved now if the cluster auto-approves and they let it."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            clones = await self.queries.clones(machine.id, report.model_dump(mode="json",
                                                                             by_alias=True))
            if in_pool(machine):
                change = pool_prechecked(machine, report, self.clock(), clones)
            else:
                settings = (await self.queries.cluster(machine.cluster)).spec.settings
                change = prechecked(settings, machine, report, self.clock(), clones)
            await self.writes.apply(change)
        self.writes.wake(change)
        return change.machines[0]

    async def refresh_kubeconfig(self, machine_id: str, sent: KubeconfigRefresh) -> bool:
        """A manager's agent sent again the file of an applied kubeconfigFrom item, which
        changed on disk; whether the machine now holds it (an unusable or older one is kept
        out, the event says why)."""
        async with self.writes.lock:
            machine = await self.queries.machine_by_id(machine_id)
            spec = (await self.queries.cluster(machine.cluster)).spec
            change = refresh_kubeconfig(spec, machine, sent.item, sent.fingerprint,
                                        sent.kubeconfig, self.clock())
            await self.writes.apply(change)
        self.writes.wake(change)
        held = change.machines[0] if change.machines else machine
        return held.kubeconfig == sent.kubeconfig

    async def assignment_of(self, inputs: AssignmentInputs) -> Assignment:
        host = await self.post_deploy.host(inputs.stored) \
            if may_host_post_deploy(inputs.machine) else None
        assignment = build_assignment(inputs, host)
        target = await self.move_targets.current()
        return assignment if target is None else \
            assignment.model_copy(update={"move_target": target})

    async def current_assignment(self, machine_id: str) -> Assignment:
        machine = await self.queries.machine_by_id(machine_id)
        if in_pool(machine):
            target = await self.move_targets.current()
            return pool_assignment(machine).model_copy(update={"move_target": target})
        stored = await self.queries.cluster(machine.cluster)
        peers = await self.store.list_machines(machine.cluster, role="manager")
        return await self.assignment_of(AssignmentInputs(stored, machine, peers))

    async def wait_assignment(self, machine_id: str, after: int, held: Collection[str],
                              timeout: float) -> tuple[Version, Assignment | None]:
        """Long-poll: the assignment with its version as soon as it is not the one the agent
        holds (generation `after`, tags `held`: domain/assignments/etags.py), at once when the agent is
        ahead or names another epoch; None for the assignment when the wait ran out with
        nothing written to the machine and the agent's tag is current: the caller has this
        assignment already, and answering without reading it again is most of what a fleet's
        idle polls cost."""
        woken = self.notifier.subscribe(machine_id)
        version = await self.versions.version(machine_id)  # mostly kept, else nothing decoded
        if version is None:
            raise await self.queries.missing(machine_id)
        if may_wait(version, after, held):
            try:
                async with asyncio.timeout(timeout):  # no task of its own, unlike wait_for
                    await woken.wait()
            except TimeoutError:
                if not_modified(version, held):
                    return version, None
            news = woken.news
            if isinstance(news, AssignmentInputs) and news.machine.generation > after:
                # what the pass that woke it wrote
                return replace(version, generation=news.machine.generation), \
                    await self.assignment_of(news)
        assignment = await self.current_assignment(machine_id)
        return replace(version, generation=assignment.generation), assignment

    async def report(self, machine_id: str, report: ItemReport) -> None:
        """Record an item report; returns once it is durable. Reports arriving while others
        are being written are written together (one lock, one transaction, one fsync for the
        lot), each refused or accepted on its own."""
        await self._reports.submit((machine_id, report))

    async def _write_reports(self, batch: list[Pending[tuple[str, ItemReport]]]) -> None:
        """Fold the reports in arrival order (a machine's second report on top of its first),
        each decided as a `Change`, and apply them combined in one transaction; a report that
        does not fit (unknown machine or item, bad kubeconfig) is refused alone and changes
        nothing. Runs under the write lock (taken by the group commit)."""
        machines = {m.id: m for m in await self.store.get_machines({p.request[0] for p in batch})}
        known: dict[str, tuple[ClusterSpec, tuple[str, ...], dict[str, str]]] = {}
        changes: list[Change] = []
        hosts: set[str] = set()  # clusters whose post-deploy step was reported on
        for pending in batch:
            machine_id, report = pending.request
            try:
                machine = machines.get(machine_id)
                if machine is None:
                    raise await self.queries.missing(machine_id)
                if machine.cluster not in known:
                    known[machine.cluster] = await self._reportable(machine.cluster)
                spec, managers, outputs = known[machine.cluster]
                change = fold_report(spec, managers, machine, report, self.clock(), outputs)
            except Exception as exc:  # this caller's answer, not the batch's
                pending.fail(exc)
                continue
            machines[machine_id] = change.machines[0]
            changes.append(change)
            if report.phase == "postdeploy":
                hosts.add(machine.cluster)
        if changes:
            batched = combined(changes)
            await self.writes.apply(batched)
            for cluster in hosts:  # once written: the post-deploy step's host is read anew
                self.post_deploy.forget(cluster)
            self.writes.wake(batched)

    async def _reportable(self, cluster: str
                          ) -> tuple[ClusterSpec, tuple[str, ...], dict[str, str]]:
        """The cluster's spec and its deployed managers, what the items a report may name are
        made of (reports.reportable_items), and its outputs (a report's are checked
        against)."""
        stored = await self.queries.cluster(cluster)
        managers = await self.store.list_machines(cluster, role="manager")
        return (stored.spec, deployed_managers(managers),
                cluster_outputs(managers, stored.outputs))
