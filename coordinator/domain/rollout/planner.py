"""The planner: pure functions from (cluster spec, machines) to state transitions, and to the
machines those transitions lead to. Pure: no I/O, no clock (`enact` is given `now`), nothing
kept between calls but catalog.py's fingerprints (which change no answer), and the machines
given are never changed (they are frozen; new ones are returned).

The ordering invariants of the design live here and nowhere else: prepare in parallel; the
first manager deploys alone, the other managers one at a time, workers in batches only once a
manager is deployed; upgrades take managers one at a time, then workers in batches (bounded
by maxUnavailable too), each drained before its items run (what a machine is due for is
releases.py's); a machine whose items saw another manager list than the deployed one goes
through Reconfigure, managers one at a time and workers in batches. The reconciler loads,
calls `plan`, persists.

Decisions are ordered so that persisting any prefix of them keeps the invariants: the
transitions that free a slot (or change nothing about slots) come first, and the admissions
into Deploy and Upgrade, which respect the limits after those, come last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from coordinator.domain.durations import utc
from coordinator.domain.model import (
    DEPLOYED_STATES,
    PHASE_OF_STATE,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    NodeStatus,
    Role,
    admission_order,
    deployed_managers,
    first_manager,
    is_first_manager,
    machine_items,
    member_removal_due,
    needs_drain,
    node_upgraded,
    ordered,
    pending_items,
    phase_items,
    recovery_due,
    reset_skipped,
)
from coordinator.domain.nodes.forecast import NodeForecast
from coordinator.domain.nodes.nodes import awaits_node, found_down, metadata_due
from coordinator.domain.nodes.removal import may_be_removed, node_deletion_due
from coordinator.domain.releases.releases import (
    at_release,
    awaiting_upgrade,
    baseline,
    behind,
    first_only_notes,
    first_upgrader,
    joins_upgraded,
    names,
    reached_baseline,
    to_run,
)
from coordinator.domain.releases.versions import control_plane_behind
from coordinator.domain.rollout.prerequisites import deploy_gate
from coordinator.domain.rollout.remedies import drain_warnings
from coordinator.domain.rollout.windows import next_opening, open_now
from nodeagent.wire.contract import ROLES, Phase
from nodeagent.wire.protocol import StateItem

S = MachineState
# A manager in one of these states is changing the control plane: another may start only
# once none is.
_MANAGER_BUSY = frozenset({S.DEPLOY, S.UPGRADE, S.RECONFIGURE})

# Where a machine goes once every item of its state's phase is applied (None: the record is
# removed). Upgrade also needs its node uncordoned, Deleting its Node deleted: see _advance.
_ON_PHASE_COMPLETE: dict[MachineState, tuple[MachineState | None, str]] = {
    S.DEPLOY: (S.READY, "deploy items applied"),
    S.RECONFIGURE: (S.READY, "reconfigure items applied"),
    S.UPGRADE: (S.READY, "upgrade items applied"),
    S.DELETING: (None, "reset items applied: machine removed"),
}


@dataclass(frozen=True)
class Decision:
    """One transition: the reconciler persists it and records the reason in the event history."""

    machine_id: str
    hostname: str
    from_state: MachineState
    to_state: MachineState | None  # None: remove the machine record (reset finished)
    reason: str  # human text for the event history
    release: str | None = None  # the release the machine is at once this is applied
    managers: tuple[str, ...] | None = None  # the manager list its deploy or reconfigure
    # items see (into Deploy or Reconfigure), or applied (back to Ready)
    baseline: frozenset[str] = frozenset()  # upgrade items it takes as applied, at release
    upgrading: frozenset[str] = frozenset()  # into Upgrade: the items it is admitted to run
    deploy_order: int | None = None  # a manager admitted into Deploy: the how-manyth
    kubernetes: str | None = None  # the Kubernetes version its items brought it to
    first_upgrader: bool = False  # a manager admitted into Upgrade as its release's first


@dataclass
class _Pass:
    """What one planning pass knows: the machines and their states once its decisions apply."""

    spec: ClusterSpec
    machines: list[Machine]
    complete: Callable[[Machine], bool]
    now: float | None = None  # for the maintenance windows; None: not consulted
    after: dict[str, MachineState | None] = field(default_factory=dict)
    role: dict[str, Role | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.after = {m.id: m.state for m in self.machines}
        self.role = {m.id: m.role for m in self.machines}

    def count(self, state: MachineState, role: Role) -> int:
        return sum(s is state and self.role[i] == role for i, s in self.after.items())

    def managers_after(self) -> tuple[str, ...]:
        return deployed_managers(replace(m, state=s) for m in self.machines
                                 if m.role == "manager" and (s := self.after[m.id]) is not None)

    def manager_slot_free(self) -> bool:
        """No manager deploying, upgrading or reconfiguring: one may start doing so."""
        return not any(self.role[i] == "manager" and s in _MANAGER_BUSY
                       for i, s in self.after.items())

    def manager_leaving(self) -> bool:
        """A manager is being deleted: its etcd member is being removed, so no other manager
        joins or restarts its control plane (Deploy, Upgrade) until it is gone; reconfiguring
        the others for the new list may go on."""
        return any(self.role[i] == "manager" and s is S.DELETING for i, s in self.after.items())

    def manager_node_down(self) -> bool:
        """down_manager: no other manager joins or restarts its control plane (Deploy,
        Upgrade) meanwhile."""
        return down_manager(self.spec, self.machines) is not None


def down_manager(spec: ClusterSpec, machines: Iterable[Machine]) -> str | None:
    """The hostname of a manager whose Node is found NotReady or gone (nodes.found_down): its
    etcd member may be down, so no other manager joins or restarts its control plane until it
    is Ready again or deleted, as etcd asks of a member change."""
    return next((m.hostname for m in machines if m.role == "manager" and found_down(spec, m)),
                None)


def plan(spec: ClusterSpec, machines: Sequence[Machine], now: float | None = None
         ) -> list[Decision]:
    """One pass: every transition the invariants allow now, at most one per machine.

    Deterministic: machines are considered in (created_at, hostname, id) order, whatever
    order the store returned them in. now: the moment, for the maintenance windows (None:
    windows are not consulted).
    """
    managers = deployed_managers(machines)
    state = _Pass(spec, ordered(machines), _phase_completion(spec, managers), now)
    decisions = [_record(spec, m, d, managers, state.machines) for m in state.machines
                 if (d := _advance(state, m)) is not None]
    for d in decisions:
        state.after[d.machine_id] = d.to_state
    decided = {d.machine_id for d in decisions}
    return (decisions + _admit_to_deploy(state) + _admit_to_reconfigure(state, managers, decided)
            + _admit_to_upgrade(state))


def enact(machines: Sequence[Machine], decisions: Sequence[Decision], now: float) -> list[Machine]:
    """The machines after the decisions, in their input order; removed ones are dropped.

    A decision made from another state than the machine's is refused: it was planned on a
    stale snapshot, and applying it could break the invariants. One that keeps the state (a
    Ready machine recorded at a release) changes only what it records.
    """
    by_id = {d.machine_id: d for d in decisions}
    result: list[Machine] = []
    for machine in machines:
        decision = by_id.get(machine.id)
        if decision is None:
            result.append(machine)
            continue
        if decision.from_state is not machine.state:
            raise ValueError(
                f"{machine.hostname}: decision from {decision.from_state} but machine is {machine.state}"
            )
        if decision.to_state is not None:
            moved = (machine if decision.to_state is machine.state
                     else machine.with_state(decision.to_state, now))
            if decision.release is not None:
                moved = replace(moved, release=decision.release)
            if decision.managers is not None:
                moved = replace(moved, managers=decision.managers)
            if decision.baseline:
                moved = replace(moved, applied=moved.applied | decision.baseline)
            if decision.upgrading:
                moved = replace(moved, upgrading=decision.upgrading)
            if decision.deploy_order is not None:
                moved = replace(moved, deploy_order=decision.deploy_order)
            if decision.kubernetes is not None:
                moved = replace(moved, kubernetes=decision.kubernetes)
            if decision.first_upgrader:
                moved = replace(moved, first_upgrader=True)
            result.append(moved)
    return result


def plan_to_fixpoint(
    spec: ClusterSpec, machines: Sequence[Machine], now: float, max_passes: int = 20
) -> tuple[list[Machine], list[Decision]]:
    """Plan and apply until nothing moves, so phases without pending items finish at once.

    max_passes bounds the work of one reconcile: a large fleet with empty phases moves one
    manager and one worker batch per pass, and the next reconcile carries on from there.
    """
    current = list(machines)
    taken: list[Decision] = []
    for _ in range(max_passes):
        decisions = plan(spec, current, now)
        if not decisions:
            break
        current = enact(current, decisions, now)
        taken.extend(decisions)
    return current, taken


def inert_filter(spec: ClusterSpec, managers: tuple[str, ...]) -> Callable[[Machine], bool]:
    """Whether a machine is inert: a planning pass neither moves it nor counts it against any
    limit, as long as the deployed managers stay `managers`. Unapproved Pending machines,
    workers still preparing, and Ready workers that answer, are recorded at the spec's release
    and have nothing to upgrade or reconfigure (nor join material to revoke, nor labels or
    taints to put on their Node, nor a Node found down: nodes.found_down) are; managers
    never are (few, and they decide the manager list, the post-deploy host and who mints). The
    reconciler plans on the working set: the machines that are not inert and one inert Ready
    worker standing in for the others (coordinator/fleetview.py), so that a pass over a large
    settled fleet costs what changed, not the fleet's size. On it, plan() decides for these
    machines what it would on the whole fleet, and nothing for the others: Reconfigure is
    decided against the managers deployed when the pass began."""
    complete = _phase_completion(spec, managers)

    def inert(machine: Machine) -> bool:
        if machine.role == "manager":
            return False
        if machine.state is S.PENDING:
            return _advance_pending(spec, machine) is None
        if machine.state is S.PREPARE:
            return not complete(machine)
        return (machine.state is S.READY and machine.responding and at_release(spec, machine)
                and not behind(spec, machine) and not _must_reconfigure(spec, machine, managers)
                and not (machine.material is not None and machine.material.values)
                and not metadata_due(spec, machine) and not found_down(spec, machine))

    return inert


def upgrade_settled(spec: ClusterSpec, machines: Sequence[Machine]) -> bool:
    """No machine upgrading or waiting to: the post-deploy step may run (again)."""
    return not any(m.state is S.UPGRADE or awaiting_upgrade(spec, m) for m in machines)


def post_deploy_host(spec: ClusterSpec, machines: Sequence[Machine]) -> Machine | None:
    """The manager that should run the cluster-level post-deploy items now, if any.

    Only ever the first manager (${managers.first}), so that the step never runs on two
    managers at once: while it deploys, upgrades, reconfigures or does not answer, the step
    waits for it rather than move; once it is deleted, the step waits until its record is
    gone (its reset items ran, so its agent has left the step) and then passes to the
    manager admitted next. Due once that manager is Ready and a worker is deployed, and
    again after an upgrade that changed the items (a new version) or, for items with a
    versionCommand, after every new release (their checks are versioned by it): done when
    one manager has applied all of them."""
    wanted = {i.fingerprint() for i in phase_items(spec, "manager", "postdeploy")}
    live = [m for m in machines if m.state is not S.DELETING]
    if not wanted or any(m.role == "manager" and wanted <= m.applied for m in live):
        return None
    host = first_manager(machines, leaving=True)
    if host is None or host.state is not S.READY or not host.responding:
        return None
    if not any(m.role == "worker" and m.state in DEPLOYED_STATES for m in live) \
            or not upgrade_settled(spec, machines):
        return None
    return host


def assignment_notices(spec: ClusterSpec, machines: Sequence[Machine]) -> list[Machine]:
    """The machines whose assignment changed while their state did not, each with what it
    records of its assignment brought up to date and a new generation, so that its agent
    fetches it: a manager that gains or loses the post-deploy step (Machine.post_deploy), a
    reconfiguring machine whose items are for another manager list than the deployed one
    (Machine.managers; the items are versioned by the list). Compared with these records
    rather than with the pass's input, since what changes an assignment may have been
    written between passes: a heartbeat or a report from a host that did not answer, a
    manager deleted. A state change sets the records along with the generation it moves."""
    host = post_deploy_host(spec, machines)
    managers = deployed_managers(machines)
    noticed = []
    for m in machines:
        hosting = host is not None and host.id == m.id
        listed = managers if m.state is S.RECONFIGURE else m.managers
        if m.post_deploy != hosting or m.managers != listed:
            noticed.append(replace(m, post_deploy=hosting, managers=listed,
                                   generation=m.generation + 1))
    return noticed


NodeAction = Literal["drain", "uncordon", "await-ready", "await-recovery", "delete-node"]


def node_action(spec: ClusterSpec, machine: Machine) -> NodeAction | None:
    """What the coordinator's Kubernetes side owes an upgrading or leaving machine's node now
    (a leaving one's: domain/nodes/removal.py)."""
    if machine.state is S.DELETING and machine.drain is not None:
        if machine.drain.stage is DrainStage.DRAINING:
            return "drain"
        return "delete-node" if node_deletion_due(spec, machine) else None
    if machine.state is not S.UPGRADE or not needs_drain(spec, machine):
        return None
    stage = machine.drain.stage if machine.drain else None
    if stage in (None, DrainStage.DRAINING):
        return "drain"
    if stage in (DrainStage.DRAINED, DrainStage.SKIPPED) and not to_run(spec, machine):
        return "uncordon"
    if stage in (DrainStage.UNCORDONED, DrainStage.NOT_READY):
        return "await-ready"
    if recovery_due(spec, machine.drain):
        return "await-recovery"
    return None


@dataclass(frozen=True)
class MachineUpgrade:
    """One machine's part in an upgrade: the items it runs, in order."""

    machine: Machine
    items: tuple[StateItem, ...]
    waiting: str = ""  # why the plan cannot reach it; "" when it can


@dataclass(frozen=True)
class UpgradePlan:
    steps: list[list[MachineUpgrade]]  # machines entering Upgrade together, in order
    waiting: list[MachineUpgrade]  # due machines the plan cannot reach
    nothing_to_run: list[Machine]  # Ready at another release: recorded at spec's as they are
    warnings: list[str] = field(default_factory=list)  # what will stop it (remedies.py)
    notes: list[str] = field(default_factory=list)  # items only one manager runs, and which
    # What each drained machine's drain would meet now, by hostname (service/forecasts.py).
    forecasts: dict[str, NodeForecast] = field(default_factory=dict)


def upgrade_plan(spec: ClusterSpec, machines: Sequence[Machine]) -> UpgradePlan:
    """The order and batches an upgrade to spec will take if every step succeeds, and what
    each machine runs: the planner itself run on a simulated fleet where each admitted
    machine finishes at once. Pausing is ignored (the plan shows what resuming would do)."""
    spec = spec.model_copy(update={"settings": spec.settings.model_copy(
        update={"upgrade": spec.settings.upgrade.model_copy(update={
            "paused": False, "windows": [], "max_failed_upgrades": None})})})
    current = list(machines)
    steps: list[list[Machine]] = []
    for _ in range(len(current) + 2):
        current = [_finish(spec, m, deployed_managers(current)) for m in current]
        current, decisions = plan_to_fixpoint(spec, current, 0.0)
        admitted = {d.machine_id for d in decisions if d.to_state is S.UPGRADE}
        if not admitted:
            break
        steps.append([_part(spec, m) for m in ordered(current) if m.id in admitted])
    manager_down = down_manager(spec, current)
    waiting = [_part(spec, m, "not responding" if not m.responding
                     else f"the Node of manager {manager_down} is down"
                     if manager_down and m.role == "manager" else "blocked by an earlier step")
               for m in ordered(current) if awaiting_upgrade(spec, m)]
    nothing_to_run = [m for m in ordered(machines) if m.state is S.READY
                      and m.release != spec.release and not behind(spec, m)]
    upgrading = [u.machine for step in steps for u in step] + [u.machine for u in waiting]
    return UpgradePlan(steps, waiting, nothing_to_run, drain_warnings(spec, machines, upgrading),
                       first_only_notes(spec, machines))


def _part(spec: ClusterSpec, machine: Machine, waiting: str = "") -> MachineUpgrade:
    """The machine's part in the plan: what its upgrade has yet to run (all of it, as the
    plan takes it when it is admitted)."""
    return MachineUpgrade(machine, tuple(i for i, _ in to_run(spec, machine)), waiting)


def _finish(spec: ClusterSpec, machine: Machine, managers: tuple[str, ...]) -> Machine:
    """The machine once its agent applied its phase and, in Upgrade, its node was uncordoned;
    in Deploy, its Node registered Ready."""
    phase = PHASE_OF_STATE.get(machine.state)
    if phase is None or machine.state is S.DELETING or not machine.responding:
        return machine
    done = ({f for _, f in to_run(spec, machine)} if machine.state is S.UPGRADE
            else {i.fingerprint() for i in pending_items(spec, machine, phase, managers)})
    drain, node = machine.drain, machine.node
    if machine.state is S.UPGRADE and needs_drain(spec, machine):
        drain = DrainStatus(DrainStage.NODE_READY, started_at=0.0)
    if machine.state is S.DEPLOY:
        node = NodeStatus(0.0, name=machine.hostname, ready=True)
    return replace(machine, applied=machine.applied | done, drain=drain, node=node)


def _phase_completion(spec: ClusterSpec, managers: tuple[str, ...]) -> Callable[[Machine], bool]:
    """Whether a machine applied every item of its state's phase, with each item's fingerprint
    hashed once per pass rather than once per machine: on a large fleet the hashing is most of
    the planner's work."""
    wanted: dict[tuple[Role, Phase, tuple[tuple[str, str], ...], bool], frozenset[str]] = {}
    conditional = any(i.when is not None for r in ROLES for i in getattr(spec.machine_types, r))

    def complete(machine: Machine) -> bool:
        phase = PHASE_OF_STATE.get(machine.state)
        if phase is None:
            return False
        if machine.role is None:  # no items are defined for a machine without a role
            return True
        if machine.state is S.UPGRADE:  # its own list: what changed since it last ran
            return not to_run(spec, machine)
        # Items with `when` differ by labels and by being the first manager: keyed by them.
        key = (machine.role, phase, tuple(sorted(machine.labels.items())) if conditional else (),
               conditional and is_first_manager(machine))
        if key not in wanted:
            wanted[key] = frozenset(i.fingerprint()
                                    for i in machine_items(spec, machine, phase, managers))
        return wanted[key] <= machine.applied

    return complete


def _advance(state: _Pass, machine: Machine) -> Decision | None:
    """Transitions that depend on the machine alone: the approval gate, finished phases (in
    Deploy, with the machine's Node Ready when the cluster gives Kubernetes access), and a
    Ready machine's release."""
    if machine.state is S.PENDING:
        return _advance_pending(state.spec, machine)
    if machine.state is S.READY:
        return _recorded_at_release(state.spec, machine, state.machines)
    target = _ON_PHASE_COMPLETE.get(machine.state)
    if target is None or not (state.complete(machine) or reset_skipped(machine)):
        return None
    if machine.state is S.UPGRADE and needs_drain(state.spec, machine):
        if not node_upgraded(state.spec, machine.drain):
            return None
        assert machine.drain is not None
        target = (S.READY, "upgrade items applied; node uncordoned and Ready" + (
            f"; {machine.drain.message}" if machine.drain.stage is DrainStage.RECOVERED else ""))
    if member_removal_due(state.spec, machine):
        return None  # its etcd member goes first (domain/nodes/removal.py)
    if machine.state is S.DELETING and machine.drain is not None:
        if not may_be_removed(machine):
            return None
        target = (None, f"reset items applied, {machine.drain.message}: machine removed")
    if machine.state is S.DELETING and not state.complete(machine):  # reset_skipped
        target = (None, "being replaced while its agent is silent: reset items skipped"
                  + (f", {machine.drain.message}" if machine.drain else "") + ": machine removed")
    if machine.state is S.DEPLOY and machine.node is not None and machine.node.ready:
        target = (S.READY, f"deploy items applied; node {machine.node.name} Ready")
    elif awaits_node(state.spec, machine):
        return None
    return _decide(machine, *target)


def _recorded_at_release(spec: ClusterSpec, machine: Machine,
                         machines: Sequence[Machine]) -> Decision | None:
    """A Ready machine with nothing to run, recorded at the spec's release, with its upgrade
    items as baseline: after a release that changed nothing of its role (so that it does not
    show as behind), or upgrade items added at its release (they are for earlier ones)."""
    if machine.role is None or at_release(spec, machine) or behind(spec, machine):
        return None
    reason = (f"release {spec.release} has nothing for it to run" if machine.release != spec.release
              else f"the upgrade items added at release {spec.release} are for earlier releases")
    return replace(_decide(machine, S.READY, f"{reason}: recorded at {spec.release}"),
                   release=spec.release, baseline=reached_baseline(spec, machine, machines),
                   kubernetes=_version(spec))


def _advance_pending(spec: ClusterSpec, machine: Machine) -> Decision | None:
    """The approval gate: approved, with a role, and no hard precheck failure; and the cluster
    not held for its provision step (settings.provision.held)."""
    if spec.settings.provision.held:
        return None
    if machine.approved and machine.role is not None and not machine.precheck_failures():
        return _decide(machine, S.PREPARE, f"approved as {machine.role}: prepare")
    return None


def _record(spec: ClusterSpec, machine: Machine, d: Decision,
            managers: tuple[str, ...], machines: Sequence[Machine]) -> Decision:
    """What a machine entering Ready has now applied: after its deploy or upgrade items, the
    spec's release (and Kubernetes version), whose upgrade items become its baseline; after
    its reconfigure items, their manager list (its deploy items' list was recorded when it
    entered Deploy). A machine staying Ready records only its release (_recorded_at_release).
    One that deployed on prepare items the spec has changed since (a new Kubernetes version
    while it was in Deploy: the package items are keyed by it) is not at the release: its
    deploy items brought it where the old ones led, so it records nothing more than the
    baseline it entered Deploy with, and upgrades: its changed prepare items and the new
    release's upgrade items (releases.upgrade_run)."""
    if d.to_state is not S.READY or d.from_state is S.READY:
        return d
    if d.from_state is S.DEPLOY and pending_items(spec, machine, "prepare"):
        return replace(d, reason=f"{d.reason}; prepare items changed since it ran them: it "
                       "upgrades to release " + spec.release)
    if d.from_state in (S.DEPLOY, S.UPGRADE):
        taken = reached_baseline(spec, machine, machines) if machine.role else frozenset()
        return replace(d, release=spec.release, baseline=taken, kubernetes=_version(spec))
    return replace(d, managers=managers)  # Reconfigure: the list its items applied


def _version(spec: ClusterSpec) -> str:
    return spec.settings.kubernetes.version or ""


def _must_reconfigure(spec: ClusterSpec, machine: Machine, managers: tuple[str, ...]) -> bool:
    return (machine.state is S.READY and machine.role is not None
            and machine.managers != managers and bool(spec.items(machine.role, "reconfigure")))


def _admit_to_deploy(state: _Pass) -> list[Decision]:
    """Prepared machines into Deploy, within the slots left once this pass's completions are
    in: those whose Kubernetes prerequisites, checked again after Prepare, hold (the gate:
    domain/rollout/prerequisites.py)."""
    deploying = [mid for mid, s in state.after.items() if s is S.DEPLOY]
    workers_deploying = state.count(S.DEPLOY, "worker")
    manager_deployed = any(state.role[mid] == "manager" and s in DEPLOYED_STATES
                           for mid, s in state.after.items())
    batch = state.spec.settings.worker_batch_size
    # Recorded on the manager admitted, so that ${managers.first} names the one chosen first.
    order = 1 + max((m.deploy_order for m in state.machines if m.role == "manager"), default=0)
    # What ${managers} holds in the assignment that starts the machine's deploy items: the
    # list they see, and reconfigure for once they are done if it is not the deployed one.
    seen = state.managers_after()
    decisions: list[Decision] = []
    kubernetes = state.spec.settings.kubernetes.version
    # A joiner's kubelet is the spec's version: none joins a control plane still older.
    lagging = control_plane_behind(state.spec, state.machines)
    for machine in state.machines:
        if machine.state is not S.PREPARE or not state.complete(machine) \
                or not deploy_gate(kubernetes, machine.precheck).open:
            continue  # its items, then its prerequisites checked again after them
        if lagging is not None and manager_deployed:
            continue
        decision = None
        if machine.role == "manager" and not manager_deployed:
            if not deploying and not state.manager_leaving():
                decision = _decide(machine, S.DEPLOY, "first manager deploys alone")
        elif machine.role == "manager":
            if state.manager_slot_free() and not state.manager_leaving() \
                    and not state.manager_node_down():
                decision = _decide(machine, S.DEPLOY, "next manager deploys (one at a time)")
        elif machine.role == "worker" and manager_deployed and workers_deploying < batch:
            workers_deploying += 1
            decision = _decide(machine, S.DEPLOY,
                               f"worker deploys ({workers_deploying} of {batch} worker slots)")
        if decision is not None:
            # Its prepare items are the spec's: the release's upgrade items lead where they
            # brought it, its baseline should it reach Ready on prepare items changed since.
            decision = replace(decision, managers=seen, kubernetes=_version(state.spec),
                               baseline=baseline(state.spec, machine.role, joins_upgraded(
                                   state.spec, machine.role == "manager" and order == 1,
                                   state.machines)) if machine.role else frozenset(),
                               deploy_order=order if machine.role == "manager" else None)
            decisions.append(decision)
            deploying.append(machine.id)
            state.after[machine.id] = S.DEPLOY
    return decisions


def _admit_to_reconfigure(state: _Pass, managers: tuple[str, ...],
                          decided: set[str]) -> list[Decision]:
    """Ready machines whose deploy or reconfigure items saw another list than `managers` (the
    managers deployed when the pass began) into Reconfigure: a manager only while no manager
    deploys, upgrades or reconfigures, workers at most workerBatchSize at once; a machine
    that does not answer waits, and so does one `decided` otherwise this pass (recorded at a
    release). A pass that changes the list admits for it from the next pass on, which the
    reconciler plans on the whole cluster (domain/reconcile/workingset.py)."""
    batch = state.spec.settings.worker_batch_size
    workers = state.count(S.RECONFIGURE, "worker")
    decisions: list[Decision] = []
    for m in state.machines:
        if state.after[m.id] is not S.READY or m.id in decided or not m.responding \
                or not _must_reconfigure(state.spec, m, managers):
            continue
        if m.role == "manager" and state.manager_slot_free():
            reason = "the manager set changed: reconfigure (managers one at a time)"
        elif m.role == "worker" and workers < batch:
            workers += 1
            reason = f"the manager set changed: reconfigure ({workers} of {batch} worker slots)"
        else:
            continue
        state.after[m.id] = S.RECONFIGURE
        decisions.append(replace(_decide(m, S.RECONFIGURE, reason), managers=managers))
    return decisions


def _admit_to_upgrade(state: _Pass) -> list[Decision]:
    """Outdated Ready machines into Upgrade: managers one at a time (none deploying or
    reconfiguring either, nor while a manager's Node is found down: _Pass.manager_node_down),
    then, once every manager is upgraded, workers in batches within maxUnavailable, which
    counts workers silent or with their Node down."""
    spec = state.spec
    settings = spec.settings.upgrade
    if upgrade_held(spec, state.machines, state.now) is not None:
        return []
    outdated = [m for m in state.machines if state.after[m.id] is S.READY
                and m.responding and awaiting_upgrade(spec, m)]
    managers_busy = sum(state.count(s, "manager") for s in _MANAGER_BUSY)
    managers_behind = managers_busy > 0 or any(
        m.role == "manager" and behind(spec, m) for m in state.machines)
    # In the order they deployed; the first admitted in a release runs the first upgrader's
    # items (`kubeadm upgrade apply`) before any other manager's (`kubeadm upgrade node`
    # follows the cluster's version), whichever manager it is (releases.first_upgrader).
    for m in sorted(outdated, key=admission_order):
        if m.role == "manager" and managers_busy == 0 and not state.manager_leaving() \
                and not state.manager_node_down():
            state.after[m.id] = S.UPGRADE
            first = first_upgrader(spec, m, state.machines)
            return [_upgrade(spec, replace(m, first_upgrader=first),
                             "manager upgrades first in this release (one at a time)" if first
                             else "manager upgrades (one at a time)")]
    if managers_behind:
        return []
    batch = spec.settings.upgrade_batch
    upgrading = state.count(S.UPGRADE, "worker")
    unavailable = upgrading + sum(
        1 for m in state.machines if m.role == "worker" and _unavailable(spec, m)
        and state.after[m.id] in DEPLOYED_STATES and state.after[m.id] is not S.UPGRADE)
    limit = settings.max_unavailable_workers
    decisions: list[Decision] = []
    for m in outdated:
        if m.role != "worker" or upgrading >= batch or (limit is not None and unavailable >= limit):
            continue
        upgrading += 1
        unavailable += 0 if _unavailable(spec, m) else 1  # counted already
        state.after[m.id] = S.UPGRADE
        decisions.append(_upgrade(spec, m, f"worker upgrades ({upgrading} of {batch} worker slots)"))
    return decisions


def failed_upgrades(machines: Sequence[Machine]) -> list[str]:
    """The machines whose upgrade failed: in Upgrade, an item given up on (the agent stopped
    retrying it), by hostname."""
    return sorted(m.hostname for m in machines if m.state is S.UPGRADE
                  and m.progress is not None and m.progress.gave_up)


def upgrade_held(spec: ClusterSpec, machines: Sequence[Machine], now: float | None) -> str | None:
    """Why no machine may start an upgrade now, as the status says it (None: they may): a
    pause, the failure budget spent, or no maintenance window open (now None: windows not
    consulted)."""
    settings = spec.settings.upgrade
    if settings.paused:
        return f"upgrades are paused (coordinator upgrade resume {spec.name})"
    failed = failed_upgrades(machines)
    if settings.max_failed_upgrades is not None and len(failed) > settings.max_failed_upgrades:
        machines = "machine" if len(failed) == 1 else "machines"
        return (f"upgrades stopped: the upgrade of {len(failed)} {machines} failed, more than "
                f"settings.upgrade.maxFailedUpgrades ({settings.max_failed_upgrades}): "
                f"{', '.join(failed[:NAMES_SHOWN])}{' ...' if len(failed) > NAMES_SHOWN else ''}"
                " (fix and retry them: coordinator machines retry MACHINE)")
    if now is not None and not open_now(settings.windows, now):
        opening = next_opening(settings.windows, now)
        return ("outside the maintenance windows: waiting for the window at "
                f"{utc(opening) if opening is not None else '-'} (settings.upgrade.windows)")
    return None


NAMES_SHOWN = 5


def _unavailable(spec: ClusterSpec, machine: Machine) -> bool:
    """A deployed worker that serves no workload now: its agent silent, or its Node found
    not Ready or gone (maxUnavailable counts it)."""
    return not machine.responding or found_down(spec, machine)


def _upgrade(spec: ClusterSpec, machine: Machine, why: str) -> Decision:
    """Admission into Upgrade, naming what it will run: its list stays these items (a first
    upgrader's, machine.first_upgrader, with the items only it runs)."""
    run = to_run(spec, machine)
    return replace(_decide(machine, S.UPGRADE, f"{why}: runs {names(run)}"),
                   upgrading=frozenset(f for _, f in run), first_upgrader=machine.first_upgrader)


def _decide(machine: Machine, to_state: MachineState | None, reason: str) -> Decision:
    return Decision(machine.id, machine.hostname, machine.state, to_state, reason)
