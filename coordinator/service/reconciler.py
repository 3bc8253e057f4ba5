"""The reconcile pass: load what changed, decide each cluster's pass whole
(domain.reconcile.reconciling.decide_pass: one `Change`), apply it in one transaction (Writes.apply;
a deleted cluster's last machine and the cluster go together), wake.

A pass reloads and plans on just the machines written since the previous one and the
cluster's working set (domain.reconcile.workingset.ClusterView), plus the machines whose last heartbeat
passed the timeout since then. It plans on the machines this replica wrote as it wrote them
(with the heartbeats written since), and reads again only those written elsewhere."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence

from coordinator.domain.assignments.assignment import AssignmentInputs
from coordinator.domain.changes import Change, combined
from coordinator.domain.model import POOL, ClusterSpec, Machine, MachineState
from coordinator.domain.pool.claims import claims
from coordinator.domain.pool.remediation import remediation
from coordinator.domain.reconcile import liveness
from coordinator.domain.reconcile.reconciling import checked_responding, decide_pass
from coordinator.domain.reconcile.workingset import ClusterView
from coordinator.domain.records import StoredCluster
from coordinator.domain.rollout import planner
from coordinator.service.drainer import Drainer
from coordinator.service.heartbeats import HeartbeatBuffer
from coordinator.service.nodewatch import NodeWatch
from coordinator.service.notifier import Notifier
from coordinator.service.postdeploy import PostDeployHosts
from coordinator.service.writes import Writes

# A rollout is under way while its passes keep moving machines: a batch's next step follows
# its items, which take seconds to minutes (see Reconciler.rolling_out).
ROLLING_OUT_SECONDS = 30.0
# A cluster that claims from the pool looks at it again at least this often, though nothing
# was written: a pool machine whose agent was silent may answer again.
CLAIMS_RECHECK_SECONDS = 10.0


class Reconciler:
    def __init__(self, writes: Writes, heartbeats: HeartbeatBuffer, notifier: Notifier,
                 drainer: Drainer, nodes: NodeWatch, post_deploy: PostDeployHosts,
                 clock: Callable[[], float]) -> None:
        self.writes = writes
        self.store = writes.store
        self.heartbeats = heartbeats
        self.notifier = notifier
        self.drainer = drainer
        self.nodes = nodes
        self.post_deploy = post_deploy
        self.clock = clock
        self._views: dict[str, ClusterView] = {}  # what the last pass kept of each cluster
        self._claims_checked: dict[str, tuple[int, float]] = {}  # generation, when
        self._last_decision = -math.inf  # when a pass here last moved a machine
        self.listening_since = clock()  # since when heartbeats reach this leader (see took_over)
        writes.on_written_elsewhere(self._written_elsewhere)

    def took_over(self) -> None:
        """This replica leads from now: the heartbeats sent to another leader, or while none
        ran, never reached it, so it judges no one silent for one timeout (domain.reconcile.liveness)."""
        self.listening_since = self.clock()

    def _written_elsewhere(self, machine_ids: Collection[str] | None) -> None:
        self.post_deploy.forget()
        if machine_ids is None:
            self._views.clear()  # the next pass loads every cluster anew

    async def reconcile_once(self) -> list[planner.Decision]:
        """Load what changed, plan, persist, wake. Safe to repeat or to interrupt at any await:
        a pass that fails drops what passes keep, and the next one loads every cluster anew."""
        async with self.writes.lock:
            return await self.reconcile_locked()

    async def reconcile_locked(self) -> list[planner.Decision]:
        """reconcile_once, with the write lock already held."""
        decided: list[planner.Decision] = []
        try:
            changed = self.writes.take_changed()
            unknown = [i for i, m in changed.items() if m is None]
            reloaded = [m for m in changed.values() if m is not None]
            reloaded += await self.store.get_machines(unknown) if unknown else []
            gone = set(unknown) - {m.id for m in reloaded}
            clusters = await self.store.list_clusters()
            for stored in clusters:
                claimed = await self._heal_and_claim(stored, reloaded, gone)
                decided += await self._reconcile_cluster(stored, [*reloaded, *claimed], gone)
        except BaseException:
            self._views.clear()
            raise
        for name in set(self._views) - {c.spec.name for c in clusters}:
            del self._views[name]
        if decided:
            self._last_decision = self.clock()
        return decided

    async def _heal_and_claim(self, stored: StoredCluster, reloaded: Sequence[Machine],
                              gone: set[str]) -> list[Machine]:
        """The cluster's health policy (domain/pool/remediation.py: the unhealthy claimed
        machines it replaces) and its claims on the pool (domain/pool/claims.py, filling their
        places too) decided and written, when its spec claims and something they depend on may
        have changed: its spec, a machine of the pool, a machine removed, one of its claimed
        machines leaving, or CLAIMS_RECHECK_SECONDS gone by (a pool machine's agent answers
        again, a machine's unhealthy time runs out). Not every report of its machines: a
        rollout's would list the cluster on every pass. The machines written, for the pass
        that follows."""
        spec, now = stored.spec, self.clock()
        if (spec.pool is None and spec.settings.health.unhealthy_after_seconds is None) \
                or stored.deleting:
            self._claims_checked.pop(spec.name, None)
            return []
        generation, at = self._claims_checked.get(spec.name, (0, -math.inf))
        touched = gone or any(m.cluster == POOL or (m.cluster == spec.name and m.claim and
                                                    m.state is MachineState.DELETING)
                              for m in reloaded)
        if generation == stored.generation and not touched \
                and now - at < CLAIMS_RECHECK_SECONDS:
            return []
        self._claims_checked[spec.name] = (stored.generation, now)
        members = await self.store.list_machines(spec.name)
        healed = remediation(spec, members, now).change
        taken = {m.id: m for m in healed.machines}
        members = [taken.get(m.id, m) for m in members]
        pool = await self.store.list_machines(POOL)
        heard = {m.id: self.heartbeats.last_heard(m) for m in pool}
        change = combined([healed, claims(spec, members, pool, heard, now).change])
        if not change.writes:
            return []
        await self.writes.apply(change, planned=True)  # the pass that follows plans on them
        self.writes.wake(change)
        return list(change.machines)

    def rolling_out(self) -> bool:
        """Whether a pass here moved a machine within ROLLING_OUT_SECONDS: the next step of a
        rollout may be due any moment, and what would pause the process had better wait."""
        return self.clock() - self._last_decision < ROLLING_OUT_SECONDS

    async def _reconcile_cluster(self, stored: StoredCluster, reloaded: Sequence[Machine],
                                 gone: set[str]) -> list[planner.Decision]:
        """Load the working set, decide the pass (domain.reconcile.reconciling), apply its change in one
        transaction (the emptied cluster's removal with it), wake."""
        now = self.clock()
        checked: list[Change] = []
        view = await self._working_set(stored, reloaded, gone, now, checked)
        decided = decide_pass(stored, view.working(), now, combined(checked))
        change, stored = decided.change, decided.stored
        self.post_deploy.found(stored, decided.post_deploy_host)
        if change.writes:
            await self.writes.apply(change, planned=True)
            self.writes.wake(change, await self._assignment_news(stored, change.machines))
        self.drainer.schedule(stored.spec, decided.current)
        self.nodes.schedule(stored.spec, decided.current, view.idle_ready)
        if view.update(list(change.machines), change.removed):
            self._views[stored.spec.name] = view
        else:
            self.notifier.kick()  # the deployed managers changed: the next pass loads the cluster
        if decided.cluster_emptied:
            self._views.pop(stored.spec.name, None)
            self.post_deploy.forget(stored.spec.name)
        return decided.decisions

    async def _working_set(self, stored: StoredCluster, reloaded: Sequence[Machine],
                           gone: set[str], now: float, out: list[Change]) -> ClusterView:
        """The cluster's working set for this pass: the last pass's, updated with what changed
        and with the machines whose heartbeats stopped since, or loaded whole."""
        spec = stored.spec
        cutoff = liveness.silent_before(now, spec.settings.heartbeat_timeout_seconds,
                                        self.listening_since)
        view = self._views.pop(spec.name, None)
        loaded: list[Machine] = []
        current = view is not None and view.generation == stored.generation and not stored.deleting
        if view is not None and current:
            known = {m.id for m in reloaded}
            silent = [i for i in await self.store.machines_last_seen_between(
                spec.name, view.checked_until, cutoff) if i not in known]
            loaded = [m for m in reloaded if m.cluster == spec.name]
            loaded += await self.store.get_machines(silent) if silent else []
            loaded = self._check_responding(spec, loaded, now, out)
            view.checked_until = max(view.checked_until, cutoff)
        moved = {m.id for m in reloaded if m.cluster != spec.name}  # claimed, or back in the pool
        if view is None or not current or not view.update(loaded, gone | moved):
            have = {m.id for m in loaded}  # a manager change: the rest of the cluster too
            rest = [m for m in await self.store.list_machines(spec.name) if m.id not in have]
            loaded += self._check_responding(spec, rest, now, out)
            view = ClusterView.load(spec, stored.generation, loaded, cutoff)
        if (stand_in := view.missing_stand_in()) is not None:
            view.update(self._check_responding(spec, await self.store.get_machines([stand_in]),
                                               now, out))
        return view

    async def _assignment_news(self, stored: StoredCluster,
                               written: Iterable[Machine]) -> dict[str, AssignmentInputs]:
        """For the machines a pass wrote whose agents are waiting: what their assignments are
        made of, read once for all of them (their long-polls would each read it again)."""
        waiting = [m for m in written if self.notifier.waiting(m.id)]
        if not waiting:
            return {}
        peers = await self.store.list_machines(stored.spec.name, role="manager")
        return {m.id: AssignmentInputs(stored, m, peers) for m in waiting}

    def _check_responding(self, spec: ClusterSpec, machines: Sequence[Machine], now: float,
                          out: list[Change]) -> list[Machine]:
        """The machines with `responding` as their last heartbeat says now, the change that
        records the changed ones into out (reconciling.checked_responding)."""
        heard = {m.id: self.heartbeats.last_heard(m) for m in machines}
        checked, change = checked_responding(spec, machines, heard, now, self.listening_since)
        out.append(change)
        return checked
