"""The reconcile pass: load what changed, plan with the pure planner, persist, wake.

A pass reloads and plans on just the machines written since the previous one and the
cluster's working set (domain.workingset.ClusterView), plus the machines whose last heartbeat
passed the timeout since then. It plans on the machines this replica wrote as it wrote them
(with the heartbeats written since), and reads again only those written elsewhere."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from coordinator.domain import liveness, planner
from coordinator.domain.assignment import AssignmentInputs, waits_notices
from coordinator.domain.events import decision_event, event
from coordinator.domain.minting import mint_pass
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.outputs import adopted
from coordinator.domain.records import ClusterOutput, Event, StoredCluster
from coordinator.domain.workingset import ClusterView
from coordinator.service.drainer import Drainer
from coordinator.service.heartbeats import HeartbeatBuffer
from coordinator.service.nodewatch import NodeWatch
from coordinator.service.notifier import Notifier
from coordinator.service.postdeploy import PostDeployHosts
from coordinator.service.writes import Writes

# A rollout is under way while its passes keep moving machines: a batch's next step follows
# its items, which take seconds to minutes (see Reconciler.rolling_out).
ROLLING_OUT_SECONDS = 30.0


@dataclass
class PassWrites:
    """What one cluster's pass is about to write."""

    changed: dict[str, Machine] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    outputs: dict[str, ClusterOutput] = field(default_factory=dict)  # for the cluster to keep


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
        self._last_decision = -math.inf  # when a pass here last moved a machine
        self.listening_since = clock()  # since when heartbeats reach this leader (see took_over)
        writes.on_written_elsewhere(self._written_elsewhere)

    def took_over(self) -> None:
        """This replica leads from now: the heartbeats sent to another leader, or while none
        ran, never reached it, so it judges no one silent for one timeout (domain.liveness)."""
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

    async def _reconcile_cluster(self, stored: StoredCluster, reloaded: Sequence[Machine],
                                 gone: set[str]) -> list[planner.Decision]:
        spec, now = stored.spec, self.clock()
        out = PassWrites()
        view = await self._working_set(stored, reloaded, gone, now, out)
        machines = view.working()
        stored = self._keep_outputs(stored, machines, now, out)
        after, decisions = planner.plan_to_fixpoint(spec, machines, now)
        by_id = {m.id: m for m in after}
        out.events += [decision_event(now, spec.name, d, by_id.get(d.machine_id)) for d in decisions]
        before = {m.id: m for m in machines}
        out.changed.update({m.id: m for m in after if m != before.get(m.id)})
        host = planner.post_deploy_host(spec, after)
        out.events += self._notices(spec, after, out.changed)
        after = self._values(stored, [out.changed.get(m.id, m) for m in after], host, now, out)
        out.events += self._post_deploy_in_place(spec, host, after, decisions)
        self.post_deploy.found(stored, host.id if host else None)
        removed = {d.machine_id: now for d in decisions if d.to_state is None}
        if out.changed or out.events or removed:
            await self.writes.commit_planned(list(out.changed.values()), out.events, removed,
                                             {spec.name: out.outputs} if out.outputs else None)
            self.notifier.wake([*out.changed, *removed],
                               await self._assignment_news(stored, out.changed.values()))
        current = [out.changed.get(m.id, m) for m in after]
        self.drainer.schedule(spec, current)
        self.nodes.schedule(spec, current, view.idle_ready)
        if view.update(list(out.changed.values()), removed):
            self._views[spec.name] = view
        else:
            self.notifier.kick()  # the deployed managers changed: the next pass loads the cluster
        if stored.deleting and not after:
            await self._remove_if_empty(spec.name)
        return decisions

    async def _working_set(self, stored: StoredCluster, reloaded: Sequence[Machine],
                           gone: set[str], now: float, out: PassWrites) -> ClusterView:
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
        if view is None or not current or not view.update(loaded, gone):
            have = {m.id for m in loaded}  # a manager change: the rest of the cluster too
            rest = [m for m in await self.store.list_machines(spec.name) if m.id not in have]
            loaded += self._check_responding(spec, rest, now, out)
            view = ClusterView.load(spec, stored.generation, loaded, cutoff)
        if (stand_in := view.missing_stand_in()) is not None:
            view.update(self._check_responding(spec, await self.store.get_machines([stand_in]),
                                               now, out))
        return view

    async def _remove_if_empty(self, name: str) -> None:
        """A cluster being deleted goes once its last machine went."""
        if await self.store.list_machines(name):
            return
        await self.store.remove_cluster(name)
        await self.writes.record([event(self.clock(), name, "cluster-removed",
                                        f"cluster {name} removed")])
        self._views.pop(name, None)
        self.post_deploy.forget(name)
        self.notifier.changed()

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
                          out: PassWrites) -> list[Machine]:
        """The machines with `responding` as their last heartbeat says now; the ones that
        changed go into the pass's writes, with an event each."""
        checked = []
        for machine in machines:
            heard = self.heartbeats.last_heard(machine)
            silent = now - heard
            responding = liveness.responding(machine.responding, heard, now,
                                             spec.settings.heartbeat_timeout_seconds,
                                             self.listening_since)
            if responding != machine.responding:
                out.events.append(event(
                    now, spec.name, "responding" if responding else "not-responding",
                    f"{machine.hostname} " + ("answers again" if responding else
                                              f"missed heartbeats for {silent:.0f}s"), machine))
                machine = out.changed[machine.id] = replace(machine, responding=responding)
            checked.append(machine)
        return checked

    def _notices(self, spec: ClusterSpec, after: Sequence[Machine],
                 changed: dict[str, Machine]) -> list[Event]:
        """Wake the machines whose assignment changed while their state did not (the
        post-deploy step given or taken, a reconfiguring machine's manager list), saying
        where the post-deploy step now runs."""
        was = {m.id: m for m in after}
        events = []
        for noticed in planner.assignment_notices(spec, after):
            changed[noticed.id] = noticed
            if noticed.post_deploy and not was[noticed.id].post_deploy:
                events.append(event(self.clock(), spec.name, "post-deploy",
                                    f"post-deploy step runs on {noticed.hostname}", noticed))
        return events

    def _keep_outputs(self, stored: StoredCluster, machines: Sequence[Machine], now: float,
                      out: PassWrites) -> StoredCluster:
        """The outputs the cluster is to keep that its managers produced and it does not keep
        yet (outputs.adopted; the working set holds every manager, one this pass removes
        too), each with an event naming where it came from (never its value): the cluster as
        it is once they are written."""
        out.outputs = adopted(stored.outputs, machines, now)
        out.events += [event(now, stored.spec.name, "output-kept",
                             f"the cluster keeps ${{outputs.{name}}} as {kept.hostname} produced "
                             "it", data={"output": name, "machine": kept.machine})
                       for name, kept in out.outputs.items()]
        return replace(stored, outputs={**stored.outputs, **out.outputs}) if out.outputs \
            else stored

    def _values(self, stored: StoredCluster, after: Sequence[Machine], host: Machine | None,
                now: float, out: PassWrites) -> list[Machine]:
        """Join material minted, expired or revoked (minting.py), and the machines whose items
        wait for other outputs than they did: the machines as they are then."""
        spec = stored.spec
        minted = mint_pass(spec, after, now)
        out.changed.update({m.id: m for m in minted.machines})
        out.events += minted.events
        current = [out.changed.get(m.id, m) for m in after]
        out.changed.update({m.id: m for m in waits_notices(spec, current,
                                                           host.id if host else None,
                                                           stored.outputs)})
        return [out.changed.get(m.id, m) for m in current]

    def _post_deploy_in_place(self, spec: ClusterSpec, host: Machine | None,
                              after: Sequence[Machine],
                              decisions: Sequence[planner.Decision]) -> list[Event]:
        """Say after an upgrade that the post-deploy step's version was already in place
        (host: where the step runs now, if anywhere)."""
        upgraded = any(d.from_state is MachineState.UPGRADE for d in decisions)
        if upgraded and host is None and spec.items("manager", "postdeploy") \
                and planner.upgrade_settled(spec, after):
            return [event(self.clock(), spec.name, "post-deploy",
                          f"upgrade to {spec.release} done; the post-deploy items at "
                          "this version were already applied (none has a "
                          "versionCommand to check what is installed)")]
        return []
