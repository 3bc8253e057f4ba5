"""The ordering invariants as properties: random fleets, random agent reports, admin actions,
new releases (with changed items, and upgrade items kept from earlier releases), items changed
at the same release, drains, Nodes registering (with Kubernetes access: Deploy ends once the
machine's Node is Ready), Ready machines' Nodes found down and back, and machines that stop
answering, interleaved with planner passes; after every pass (and every prefix of its
decisions) the invariants hold, no agent is ever told to run an upgrade item of a release its
machine deployed or upgraded at, and once agents apply everything, drains finish and Nodes
are Ready again the fleet converges within a known bound: every machine applied every current
item of its role. Agents are modelled as holding the assignment they last fetched (when their
generation moved, or when they restarted): at no moment do two of them hold the post-deploy
step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from coordinator.domain.assignments.assignment import AssignmentInputs, build_assignment
from coordinator.domain.model import (
    DEPLOYED_STATES,
    PHASE_OF_STATE,
    ROLES,
    ClusterSpec,
    DrainStage,
    ItemProgress,
    Machine,
    MachineState,
    MachineTypes,
    Role,
    deployed_managers,
    first_manager,
    needs_drain,
    pending_items,
    phase_items,
)
from coordinator.domain.nodes.nodes import awaits_node, desired_metadata, found_down, observed
from coordinator.domain.reconcile.workingset import ClusterView
from coordinator.domain.records import StoredCluster
from coordinator.domain.rollout.planner import (
    Decision,
    assignment_notices,
    awaiting_upgrade,
    behind,
    enact,
    plan,
    post_deploy_host,
)
from nodeagent.wire.contract import PHASES, Phase
from nodeagent.wire.protocol import StateItem
from tests.support.builders import cluster, drained, item, items, machine, upgraded_cluster

S = MachineState
# Every transition the planner may make; anything else is skipping or going backwards.
ALLOWED = {
    (S.PENDING, S.PREPARE),
    (S.PREPARE, S.DEPLOY),
    (S.DEPLOY, S.READY),
    (S.RECONFIGURE, S.READY),
    (S.DELETING, None),
    (S.READY, S.UPGRADE),
    (S.UPGRADE, S.READY),
    (S.READY, S.RECONFIGURE),
    (S.READY, S.READY),  # recorded at the release: nothing to run
}
EVENT_KINDS = (["plan"] * 4 + ["apply", "finish", "all", "drain"] * 2
               + ["fail", "approve", "role", "delete", "release", "release", "change", "pause",
                  "silence", "restart", "node"])
RUN_AGAIN: tuple[Phase, ...] = ("prepare", "deploy")  # an upgrade runs them again when changed


def with_items(spec: ClusterSpec, role: Role, role_items: list[StateItem]) -> ClusterSpec:
    types = {r: role_items if r == role else getattr(spec.machine_types, r) for r in ROLES}
    return spec.model_copy(update={"machine_types": MachineTypes(**types)})


def revised(spec: ClusterSpec, index: int, version: str) -> ClusterSpec:
    """spec with one of a role's prepare or deploy items at a new version, if it has any."""
    role = ROLES[index % 2]
    found = getattr(spec.machine_types, role)
    changeable = [i for i in found if i.phase in RUN_AGAIN]
    if not changeable:
        return spec
    target = changeable[index % len(changeable)]
    return with_items(spec, role, [i.model_copy(update={"version": version}) if i is target else i
                                   for i in found])


def released(spec: ClusterSpec, release: str, keep_upgrades: bool) -> ClusterSpec:
    """A new release with an upgrade item per role, beside the earlier releases' ones when
    keep_upgrades (a spec that upgrades from any of them)."""
    new = upgraded_cluster(spec, release=release)
    if not keep_upgrades:
        return new
    for role in ROLES:
        new = with_items(new, role, [*getattr(new.machine_types, role),
                                     *spec.items(role, "upgrade")])
    return new


@dataclass
class World:
    """The fleet as the coordinator sees it, plus what the invariants need of its history."""

    spec: ClusterSpec
    machines: list[Machine]
    intended_role: dict[str, Role]
    hard_failed: frozenset[str]  # ids whose precheck report has a hard failure; reports never change
    now: float = 0.0
    manager_ever_deployed: bool = False
    # Per machine, the upgrade items of every release it deployed or upgraded at (or was
    # recorded at): its agent must never be told to run one.
    baseline: dict[str, set[str]] = field(default_factory=dict)
    fingerprints: dict[tuple[Role, Phase], list[str]] = field(init=False)
    view: ClusterView = field(init=False)  # the reconciler's, kept from the changes alone
    # Each agent's assignment as it last fetched it: its generation, whether it has the
    # post-deploy step, the manager list (its reconfigure items are versioned by it).
    held: dict[str, tuple[int, bool, tuple[str, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rehash()
        self.reload()

    def reload(self) -> None:
        self.view = ClusterView.load(self.spec, 0, self.machines, 0.0)

    def taken_in(self, machines: Sequence[Machine], removed: Sequence[str] = ()) -> None:
        """As the reconciler's pass does: the changes, or a reload; then a stand-in loaded
        when the one there was is no longer inert. Agents fetch what changed."""
        if not self.view.update(machines, removed):
            event("manager change: the view is loaded again")
            self.reload()
        # As the reconciler does: the stand-in became active (or went), another inert Ready
        # worker is loaded to stand in for the rest.
        if (stand_in := self.view.missing_stand_in()) is not None:
            self.view.update([m for m in self.machines if m.id == stand_in])
        self.fetch([m for m in self.machines if m.generation != self.held.get(m.id, (0,))[0]])

    def fetch(self, machines: Sequence[Machine]) -> None:
        """The agents of these machines fetch their assignment, if they answer (a silent one
        goes on with what it holds, running the post-deploy step if it had it); at most one
        manager may then hold the post-deploy step, whatever they held before."""
        host = post_deploy_host(self.spec, self.machines)
        managers = deployed_managers(self.machines)
        for m in machines:
            if m.responding:
                self.held[m.id] = (m.generation, host is not None and host.id == m.id, managers)
        present = {m.id for m in self.machines}
        self.held = {i: held for i, held in self.held.items() if i in present}
        holders = [i for i, (_, step, _) in self.held.items() if step]
        assert len(holders) <= 1, f"the post-deploy step runs on {holders} at once"
        if holders:
            event("a manager holds the post-deploy step")

    def apply(self, spec: ClusterSpec) -> None:
        """The operator applies spec: as the coordinator does when it changed, every machine
        gets a new generation, so every agent that answers fetches its assignment again."""
        if spec == self.spec:
            return
        self.spec = spec
        self.rehash()
        self.machines = [replace(m, generation=m.generation + 1) for m in self.machines]
        self.reload()
        self.taken_in([])

    def rehash(self) -> None:
        # Hashed once per spec: recomputing fingerprints per event would dominate the run time.
        self.fingerprints = {(role, phase): [i.fingerprint() for i in self.spec.items(role, phase)]
                             for role in ROLES for phase in PHASES}

    def eligible(self, m: Machine) -> bool:
        return m.approved and m.role is not None and m.id not in self.hard_failed

    def event(self, kind: str, index: int) -> None:
        self.now += 1
        if kind == "plan":
            self.plan_pass()
            return
        if kind == "all":  # every agent reports its next item applied
            self.machines = [self.applied_one(m, first=True) for m in self.machines]
            self.taken_in(self.machines)
            return
        if kind == "release":  # a new release: nothing new, or new upgrade items (and a changed item)
            release = f"r{int(self.now)}"
            if index % 4 == 0:
                spec = self.spec.model_copy(update={"release": release})
            else:
                spec = released(self.spec, release, keep_upgrades=index % 2 == 0)
            self.apply(revised(spec, index, release) if index % 3 == 0 else spec)
            return
        if kind == "change":  # the same release, with a changed item or a new upgrade item
            if index % 2 == 0:
                self.apply(revised(self.spec, index, f"v{int(self.now)}"))
            else:
                role = ROLES[index % 4 // 2]
                self.apply(with_items(self.spec, role, [*getattr(self.spec.machine_types, role),
                                                        item(f"late-{self.now}", "upgrade")]))
            return
        if kind == "pause":
            self.apply(upgraded_cluster(self.spec, release=self.spec.release,
                                        paused=not self.spec.settings.upgrade.paused))
            return
        if kind == "node":
            self.node_turns(index)
            return
        if not self.machines:
            return
        i = index % len(self.machines)
        m = self.machines[i]
        if kind == "apply":  # the agent reports one item applied, out of order
            m = self.applied_one(m, first=False)
        elif kind == "finish":  # the agent reports all items of its phase applied
            m = self.finished(m)
        elif kind == "fail" and self.pending(m):
            m = replace(m, progress=ItemProgress(self.pending(m)[0], int(self.now), "failed", "exit 1"))
        elif kind == "approve":
            m = replace(m, approved=True)
        elif kind == "role" and m.role is None and m.state is S.PENDING:
            m = replace(m, role=self.intended_role[m.id])
        elif kind == "delete" and m.state is not S.DELETING:
            m = m.with_state(S.DELETING, self.now)
        elif kind == "drain":
            m = self.drain_step(m, index)
        elif kind == "silence":  # heartbeats stop, or come back
            m = replace(m, responding=not m.responding)
        elif kind == "restart":  # the agent restarts: it fetches its assignment anew
            self.fetch([m])
        self.machines[i] = m
        self.taken_in([m])

    def node_turns(self, index: int) -> None:
        """The list of the cluster's marked Nodes finds a Ready machine's Node down, or Ready
        again, as the node watch records it."""
        ready = [i for i, m in enumerate(self.machines) if m.state is S.READY]
        if not ready:
            return
        i = ready[index % len(ready)]
        m = self.machines[i]
        m = self.looked_at(m, ready=m.node is not None and not m.node.ready)
        if found_down(self.spec, m):
            event("a Ready machine's Node is found down")
        self.machines[i] = m
        self.taken_in([m])

    def looked_at(self, m: Machine, ready: bool) -> Machine:
        """m once a look (the node watch's) finds its Node, named as its host, Ready or not."""
        return replace(m, node=observed(m.node, self.now, m.hostname,
                                        ("True" if ready else "False", "", ""),
                                        desired_metadata(self.spec, m).digest()))

    def drain_step(self, m: Machine, index: int) -> Machine:
        """The coordinator's Kubernetes side moves an upgrading node one step on: cordon and
        drain, a drain blocked then skipped by the operator, uncordon once items are done, the node
        Ready (at once, or after the timeout said it was not). With Kubernetes access, a
        machine waiting in Deploy for its Node sees it register (NotReady, or Ready at once),
        then turn Ready."""
        if awaits_node(self.spec, m):
            event("a machine waits in Deploy for its Node")
            return self.looked_at(m, ready=m.node is not None or index % 2 == 1)
        if m.state is not S.UPGRADE or not needs_drain(self.spec, m):
            return m
        stage = m.drain.stage if m.drain else None
        if stage is None:
            return drained(m, DrainStage.DRAINING)
        if stage is DrainStage.DRAINING:
            return drained(m, DrainStage.BLOCKED if index % 3 == 0 else DrainStage.DRAINED)
        if stage is DrainStage.BLOCKED:
            return drained(m, DrainStage.SKIPPED)
        if stage in (DrainStage.DRAINED, DrainStage.SKIPPED) and not self.pending(m):
            return drained(m, DrainStage.UNCORDONED)
        if stage is DrainStage.UNCORDONED:
            return drained(m, DrainStage.NOT_READY if index % 2 == 0 else DrainStage.NODE_READY)
        if stage is DrainStage.NOT_READY:
            return drained(m, DrainStage.NODE_READY)
        return m

    def applied_one(self, m: Machine, first: bool) -> Machine:
        pending = self.pending(m)
        if not pending:
            return m
        return self.ran(m, {pending[0 if first else -1]})

    def finished(self, m: Machine) -> Machine:
        pending = self.pending(m)
        return self.ran(m, set(pending)) if pending else m

    def ran(self, m: Machine, fingerprints: set[str]) -> Machine:
        """m once its agent ran these items, which it was told to."""
        assert not fingerprints & self.baseline.get(m.id, set()), \
            f"{m.hostname} was told to run an upgrade item of a release it is at or passed"
        return replace(m, applied=m.applied | fingerprints)

    def pending(self, m: Machine) -> list[str]:
        """Fingerprints of the items the machine's agent is asked to apply now: in Upgrade,
        what its assignment lists once its node is drained; reconfigure items for the manager
        list its assignment has; the post-deploy step's if its assignment has it."""
        _, step, managers = self.held.get(m.id, (0, False, ()))
        phase = "postdeploy" if step else PHASE_OF_STATE.get(m.state)
        if phase is None or m.role is None or not m.responding:
            return []
        if phase == "upgrade":
            told = build_assignment(AssignmentInputs(StoredCluster(self.spec, 1, 0.0, 0.0), m,
                                                     self.machines), None).items
            return [f for i in told if (f := i.fingerprint()) not in m.applied]
        if phase == "reconfigure":
            found = phase_items(self.spec, m.role, phase, managers)
            return [f for i in found if (f := i.fingerprint()) not in m.applied]
        return [f for f in self.fingerprints[m.role, phase] if f not in m.applied]

    def plan_pass(self) -> None:
        before = self.machines
        decisions = plan(self.spec, before)
        assert plan(self.spec, before[::-1]) == decisions, "the plan depends on the input order"
        check_working_set(self.spec, before, decisions, self.view)
        after = before
        for d in decisions:  # the reconciler may persist only part of a pass
            after = enact(after, [d], self.now)
            self.check_state(after)
        assert after == enact(before, decisions, self.now)
        check_decisions(self.spec, before, after, decisions)
        check_first_manager(before, after, decisions)
        for d in decisions:  # shown by --hypothesis-show-statistics: the paths really ran
            if d.to_state in (S.UPGRADE, S.RECONFIGURE):
                event(f"{by_id_role(before, d.machine_id)} enters {d.to_state}")
            if d.release is not None:  # at the spec's release: its upgrade items are behind it
                role = by_id_role(before, d.machine_id)
                assert role is not None
                self.baseline.setdefault(d.machine_id, set()).update(
                    self.fingerprints[role, "upgrade"])
            if d.from_state is S.READY and d.to_state is S.READY:
                event(f"recorded at the release with nothing to run ({d.reason.split(':')[0]})")
        check_transitions(before, after)
        noticed = {m.id: m for m in assignment_notices(self.spec, after)}
        after = [noticed.get(m.id, m) for m in after]  # as the reconciler's pass writes them
        self.machines = after
        was = {m.id: m for m in before}
        remaining = {m.id for m in after}
        self.taken_in([m for m in after if m != was[m.id]],
                      [m.id for m in before if m.id not in remaining])
        self.manager_ever_deployed |= any(deployed_manager(m) for m in after)

    def check_state(self, machines: Sequence[Machine]) -> None:
        deploying = [m for m in machines if m.state is S.DEPLOY]
        managers = [m for m in deploying if m.role == "manager"]
        workers = [m for m in deploying if m.role == "worker"]
        assert len(managers) <= 1, "two managers in Deploy"
        assert len(workers) <= self.spec.settings.worker_batch_size, "worker batch exceeded"
        upgrading = [m for m in machines if m.state is S.UPGRADE]
        reconfiguring = [m for m in machines if m.state is S.RECONFIGURE]
        busy_managers = [m for m in upgrading + deploying + reconfiguring if m.role == "manager"]
        assert len(busy_managers) <= 1, \
            f"managers deploying/upgrading/reconfiguring together: {busy_managers}"
        assert sum(m.role == "worker" for m in upgrading) <= self.spec.settings.upgrade_batch, \
            "upgrade batch exceeded"
        assert sum(m.role == "worker" for m in reconfiguring) <= \
            self.spec.settings.worker_batch_size, "reconfigure batch exceeded"
        if not (self.manager_ever_deployed or any(deployed_manager(m) for m in machines)):
            assert not workers, "a worker deploys before any manager was deployed"
            assert len(deploying) <= 1, "the first manager does not deploy alone"
        for m in machines:
            if not self.eligible(m):
                assert m.state in (S.PENDING, S.DELETING), f"{m.hostname} left Pending unapproved"


    def converge(self, passes: int) -> None:
        for _ in range(passes):
            for _ in range(4):  # drain, items, uncordon
                self.machines = [self.drain_step(self.finished(m), 1) for m in self.machines]
            self.taken_in(self.machines)
            self.plan_pass()

    def joining(self) -> tuple[int, int]:
        """How many managers and workers are (or will be) members of the cluster."""
        joining = [m for m in self.machines if self.eligible(m) and m.state is not S.DELETING]
        managers = sum(m.role == "manager" for m in joining)
        return managers, len(joining) - managers

    def upgrade_steps(self) -> int:
        """Passes an upgrade of the whole fleet takes: one per manager, one per worker batch."""
        managers, workers = self.joining()
        settings = self.spec.settings
        return managers + math.ceil(workers / min(
            settings.upgrade_batch,
            settings.upgrade.max_unavailable_workers or settings.upgrade_batch))

    def check_converged(self, manager_up: bool) -> None:
        assert plan(self.spec, self.machines) == []
        assert not any(m.state is S.DELETING for m in self.machines)
        for m in self.machines:
            if not self.eligible(m):
                assert m.state is S.PENDING
            elif manager_up:
                assert m.state is S.READY, f"{m.hostname} stuck in {m.state}"
                assert not awaiting_upgrade(self.spec, m), f"{m.hostname} never upgraded"
                role_items = {f for p in (*RUN_AGAIN, "upgrade") for f in self.fingerprints[m.role, p]}
                assert role_items <= m.applied, f"{m.hostname} lacks current items of its role"
                assert m.release == self.spec.release, f"{m.hostname} shows {m.release}"
                assert m.managers == deployed_managers(self.machines) or not self.spec.items(
                    m.role or "worker", "reconfigure"), f"{m.hostname} never reconfigured"
            else:  # no manager to join: workers wait prepared (or stay Ready from an earlier one)
                assert m.state in (S.PREPARE, S.READY)
        step = set(self.fingerprints["manager", "postdeploy"])
        if step and manager_up and any(m.role == "worker" and m.state is S.READY
                                       for m in self.machines):
            assert any(m.role == "manager" and step <= m.applied for m in self.machines), \
                "the post-deploy step never ran"


def by_id_role(machines: list[Machine], machine_id: str) -> str | None:
    return next(m.role for m in machines if m.id == machine_id)


def deployed_manager(m: Machine) -> bool:
    return m.role == "manager" and m.state in DEPLOYED_STATES


def check_decisions(
    spec: ClusterSpec, before: list[Machine], after: list[Machine], decisions: list[Decision]
) -> None:
    by_id = {m.id: m for m in before}
    assert len({d.machine_id for d in decisions}) == len(decisions), "two moves for one machine"
    manager_deployed_after = any(deployed_manager(m) for m in after)
    deploying_after = [m.id for m in after if m.state is S.DEPLOY]
    for d in decisions:
        m = by_id[d.machine_id]
        assert d.from_state is m.state and d.hostname == m.hostname
        assert (d.from_state, d.to_state) in ALLOWED, f"{m.hostname}: {d.from_state} -> {d.to_state}"
        assert d.reason
        if d.from_state is S.DEPLOY and d.to_state is S.READY:
            # prepare items changed since it ran them are for an upgrade (releases.py)
            assert not pending_items(spec, m, "deploy"), f"{m.hostname} Ready with deploy items left"
        if d.from_state in (S.UPGRADE, S.READY) and d.to_state is S.READY:
            assert not has_work(spec, m), f"{m.hostname} left its work undone"
        if d.to_state is S.DEPLOY and m.role == "worker":
            assert manager_deployed_after, "a worker was admitted with no manager deployed"
        if d.to_state is S.DEPLOY and m.role == "manager" and not manager_deployed_after:
            assert deploying_after == [m.id], "the first manager was admitted beside others"
        if d.to_state in (S.DEPLOY, S.UPGRADE) and m.role == "manager":
            assert not any(o.role == "manager" and o.state is S.DELETING for o in after), \
                f"{m.hostname} admitted to {d.to_state} while a manager leaves"
            assert not any(o.role == "manager" and found_down(spec, o) for o in before), \
                f"{m.hostname} admitted to {d.to_state} while a manager's Node is down"
        if d.to_state is S.UPGRADE:
            check_upgrade_admission(spec, m, after)
        if d.from_state is S.UPGRADE:
            assert not needs_drain(spec, m) or (m.drain and m.drain.stage is DrainStage.NODE_READY), \
                f"{m.hostname} left Upgrade with its node not uncordoned and Ready"
            assert d.release == spec.release
        if d.to_state is S.DEPLOY:
            assert d.managers == deployed_managers(after), "the list its deploy items see"
        if d.to_state is S.RECONFIGURE:
            assert m.responding, f"{m.hostname} reconfigures without answering"
            assert d.managers == deployed_managers(before), "not the list its items will see"
            assert m.managers != deployed_managers(before), f"{m.hostname} reconfigured for nothing"
        if d.from_state is S.RECONFIGURE:
            assert d.managers == deployed_managers(before), "not the list its items applied"


def check_first_manager(before: list[Machine], after: list[Machine],
                        decisions: list[Decision]) -> None:
    """${managers.first} names the manager admitted first from its admission on, and a pass
    never moves it to another (only its deletion does)."""
    was, now = first_manager(before), first_manager(after)
    if was is not None:
        assert now is not None and now.id == was.id, "${managers.first} moved to another manager"
    elif now is not None:
        (chosen,) = [d for d in decisions if d.machine_id == now.id]
        assert chosen.reason == "first manager deploys alone", chosen


def check_working_set(spec: ClusterSpec, before: list[Machine], decisions: list[Decision],
                      view: ClusterView) -> None:
    """The view kept from changes alone holds the working set a fresh load holds; planning
    on it decides what planning on the whole fleet does, and the fleet's plan moves none of
    the machines left out."""
    fresh = ClusterView.load(spec, 0, before, 0.0)
    assert view.active == fresh.active, "the view kept from changes went stale"
    assert (view.stand_in is None) == (fresh.stand_in is None)
    working = view.working()
    ids = {m.id for m in working}
    assert len(ids) == len(working), "a machine twice in the working set"
    assert plan(spec, working) == decisions, "the working set planned otherwise than the fleet"
    assert not [m.hostname for m in before if m.id in view.idle_ready and found_down(spec, m)], \
        "an idle machine's Node is found down: the list of marked Nodes would not load it"
    host, stand_in_host = post_deploy_host(spec, before), post_deploy_host(spec, working)
    assert (host and host.id) == (stand_in_host and stand_in_host.id)


def has_work(spec: ClusterSpec, m: Machine) -> bool:
    """The rule of releases, restated: a changed prepare or deploy item, or an upgrade item
    not applied at another release than the spec's, is work for an upgrade."""
    changed = any(pending_items(spec, m, phase) for phase in RUN_AGAIN)
    return changed or (m.release != spec.release and bool(pending_items(spec, m, "upgrade")))


def check_upgrade_admission(spec: ClusterSpec, m: Machine, after: list[Machine]) -> None:
    settings = spec.settings.upgrade
    assert not settings.paused, f"{m.hostname} admitted into Upgrade while paused"
    assert m.responding and has_work(spec, m)
    if m.role == "worker":
        managers = [x for x in after if x.role == "manager"]
        assert not any(x.state is S.UPGRADE or behind(spec, x) for x in managers), \
            f"worker {m.hostname} admitted before every manager was upgraded"
        limit = settings.max_unavailable_workers
        unavailable = [x for x in after if x.role == "worker" and (x.state is S.UPGRADE or (
            not x.responding and x.state in DEPLOYED_STATES))]
        assert limit is None or len(unavailable) <= limit, "maxUnavailable exceeded"


def check_transitions(before: list[Machine], after: list[Machine]) -> None:
    now_state = {m.id: m.state for m in after}
    for m in before:
        new = now_state.get(m.id)
        assert new is m.state or (m.state, new) in ALLOWED, f"{m.hostname}: {m.state} -> {new}"


Counts = tuple[int, int]  # at least, at most


@st.composite
def worlds(draw: st.DrawFn, managers: Counts = (0, 6), workers: Counts = (0, 30),
           reconfigure: Counts = (0, 1), post_deploy: Counts = (0, 2)) -> World:
    """0-6 managers, 0-30 workers, batch 1-5; item lists per role and phase, often empty."""
    counts = {"prepare": (0, 3), "deploy": (0, 3), "reset": (0, 3), "reconfigure": reconfigure}
    role_items = {
        role: [i for phase, (least, most) in counts.items()
               for i in items(phase, draw(st.integers(least, most)), prefix=f"{role}-")]
        for role in ("manager", "worker")
    }
    role_items["manager"] += items("postdeploy", draw(st.integers(*post_deploy)))
    # With Kubernetes access, Deploy ends only once the machine's Node is Ready.
    kube = {"kubernetes": {"kubeconfig": "/etc/coordinator/kubeconfig"}} if draw(st.booleans()) else {}
    spec = upgraded_cluster(
        cluster(manager=role_items["manager"], worker=role_items["worker"],
                batch=draw(st.integers(1, 5)), **kube),
        release="1.0.0-upgrade",
        worker_batch_size=draw(st.none() | st.integers(1, 4)),
        max_unavailable_workers=draw(st.none() | st.integers(1, 4)),
        drain_managers=draw(st.booleans()),
    )
    roles: list[Role] = (["manager"] * draw(st.integers(*managers))
                         + ["worker"] * draw(st.integers(*workers)))
    some = st.sets(st.integers(0, max(len(roles) - 1, 0)), max_size=len(roles))
    return fleet(spec, roles, unapproved=draw(some), roleless=draw(some), failing=draw(some))


def fleet(spec: ClusterSpec, roles: Sequence[Role], unapproved: AbstractSet[int] = frozenset(),
          roleless: AbstractSet[int] = frozenset(), failing: AbstractSet[int] = frozenset()) -> World:
    """The world of a fresh fleet of these roles: machine n unapproved, without its role yet
    or failing a hard precheck if n is in that set."""
    machines = [
        machine(
            f"{role[0]}{n}",
            None if n in roleless else role,
            approved=n not in unapproved,
            hard_failure=n in failing,
            created_at=n % 4,  # ties and an order unlike the hostnames'
        )
        for n, role in enumerate(roles)
    ]
    return World(
        spec,
        machines,
        intended_role={m.id: role for m, role in zip(machines, roles, strict=True)},
        hard_failed=frozenset(m.id for m in machines if m.precheck_failures()),
    )


def histories(kinds: Sequence[str]) -> st.SearchStrategy[list[tuple[str, int]]]:
    return st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, 40)),
                    min_size=20, max_size=100)


def a_managers_node_found_down() -> World:
    """The fleet of the history pinned below: two managers with a prepare item each, in a
    cluster the coordinator reaches (Deploy ends once the Node is Ready)."""
    spec = upgraded_cluster(
        cluster(manager=items("prepare", 1), kubernetes={"kubeconfig": "/etc/coordinator/kubeconfig"}),
        release="1.0.0-upgrade")
    return fleet(spec, ["manager", "manager"])


# Found by a random search: m1 prepares and deploys first, its Node registers Ready and is then
# found down; m0, prepared meanwhile, waits for it (planner.down_manager) until it is Ready again.
@example(world=a_managers_node_found_down(),
         history=[("plan", 0), ("finish", 1), ("plan", 0), ("drain", 1), ("plan", 0), ("node", 0),
                  ("finish", 0), ("plan", 0)])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), history=histories(EVENT_KINDS))
def test_invariants_hold_and_the_fleet_converges(
    world: World, history: list[tuple[str, int]]
) -> None:
    live_through(world, history)


# Enough examples that main's planner, which moved the step to another manager, failed it in
# 8 runs out of 10; its scenario tests (test_upgrade_planning.py) fail every time.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(managers=(3, 5), workers=(1, 4), reconfigure=(1, 1), post_deploy=(0, 0)),
       steps=st.integers(2, 3),
       history=histories(["plan"] * 4 + ["restart", "silence"] * 3 + ["approve"] * 2
                         + ["apply", "finish", "all", "drain", "fail", "role", "delete"]))
def test_the_post_deploy_step_runs_on_one_manager_at_most_while_managers_change(
    world: World, steps: int, history: list[tuple[str, int]]
) -> None:
    """A settled cluster is given a post-deploy step, which runs while managers join (those
    approved late), reconfigure, stop answering, restart and leave."""
    settle(world)
    manager_items = [*world.spec.machine_types.manager, *items("postdeploy", steps)]
    world.apply(world.spec.model_copy(update={"machine_types": world.spec.machine_types.model_copy(
        update={"manager": manager_items})}))
    world.event("plan", 0)  # the step starts on its host
    live_through(world, history)


def live_through(world: World, history: list[tuple[str, int]]) -> None:
    """The history, then every agent answering and applying all it is asked: the invariants
    hold throughout, and the fleet converges, upgraded."""
    for kind, index in history:
        world.event(kind, index)
    manager_up = settle(world)
    for kind, index in [("node", 0), ("node", 1), ("plan", 0), ("node", 0), ("node", 1),
                        ("plan", 0)]:  # Nodes of the settled fleet found down, then back
        world.event(kind, index)

    # A new release on the settled fleet, keeping the earlier upgrade items and changing a
    # deploy or prepare item of each role: each pass upgrades one manager, then one worker batch.
    final = released(world.spec, "final", keep_upgrades=True)
    for index in range(2):
        final = revised(final, index, "final")
    world.apply(final)
    world.converge(world.upgrade_steps() + 2)
    world.check_converged(manager_up)
    if manager_up:
        assert all(m.release == "final" for m in world.machines if m.state is S.READY)


def settle(world: World) -> bool:
    """Liveness: every agent answers and applies whatever it is asked, every Node found down
    is found Ready again, every drain goes through, the upgrade is resumed, and nobody else
    acts; the fleet converges within a known bound. Whether a manager is up.

    The Nodes come back because the real coordinator waits for them: while a manager's Node
    is found down no manager deploys or upgrades (planner.down_manager, as etcd asks),
    until the node watch finds it Ready again or the operator deletes that manager. A Node
    left down forever is a fleet that is not live, not one the planner should converge."""
    world.machines = [replace(world.looked_at(m, ready=True) if found_down(world.spec, m) else m,
                              responding=True) for m in world.machines]
    world.apply(upgraded_cluster(world.spec, release=world.spec.release, paused=False))
    managers, workers = world.joining()
    settings = world.spec.settings
    # One pass to Prepare, one to the first Deploy, then each pass finishes one manager and one
    # worker batch and refills the freed slots at once; then the upgrade in the same way, and
    # two passes per manager for Reconfigure, one at a time once the last manager joined;
    # workers reconfigure in batches alongside, in no more passes than their deploy took.
    bound = (3 + max(managers, math.ceil(workers / settings.worker_batch_size))
             + 2 + world.upgrade_steps() + 2 * managers + 2)
    world.converge(bound)
    manager_up = any(deployed_manager(m) for m in world.machines)
    assert manager_up or managers == 0
    world.check_converged(manager_up)
    return manager_up
