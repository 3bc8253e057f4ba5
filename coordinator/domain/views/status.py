"""What an operator watching a rollout needs: ordered stage conditions for a cluster, one
function per stage, and how far the rollout in progress has come; where each machine is within
its phase is steps.py's.

Pure: computed from the spec, the machines and their state-change history (the `state` events
the reconciler records), with `now` passed in. Each machine's share (MachinePart) is computed
apart from the stages that sum them, so that statusmemo.py can keep the shares of the machines
that did not change. The API serves it; the CLI and dashboard draw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator.domain.model import (
    NO_ACCESS_SHORT,
    ClusterSpec,
    Machine,
    MachineState,
    Role,
    drains_skipped,
    kubernetes_access,
    phase_items,
)
from coordinator.domain.nodes.nodes import awaits_node, node_down, node_wait
from coordinator.domain.nodes.workloads import SystemWorkloads
from coordinator.domain.releases.releases import awaiting_upgrade
from coordinator.domain.rollout.planner import DEPLOYED_STATES, post_deploy_host, upgrade_held
from coordinator.domain.rollout.remedies import FIRST_MANAGER_WAIT, drain_failure
from coordinator.domain.rollout.steps import History, current_run, failure, gave_up_text, machine_step
from coordinator.domain.specs.catalog import catalog
from nodeagent.wire.contract import Phase

StageState = Literal["waiting", "in-progress", "failing", "done"]

# Event kinds status needs from the history: only state changes.
HISTORY_KINDS = ("state",)
NAMES_SHOWN = 4


@dataclass(frozen=True)
class Stage:
    """One condition of the rollout, in the order they are reached."""

    name: str
    title: str
    state: StageState
    since: float | None  # when the stage entered this state
    message: str


@dataclass(frozen=True)
class Rollout:
    """Items applied out of those the rollout in progress runs, and an estimate of the rest."""

    done: int
    total: int
    machines: int  # machines taking part
    started_at: float | None
    eta_seconds: float | None  # None until the pace is known (or while held); 0 once nothing is left
    held: str | None = None  # why no estimate is given: the rollout waits on the operator (held_by)


# -- stages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Track:
    """One machine's part in one stage."""

    hostname: str
    eligible: float | None  # since when the stage has waited on this machine; None: from now
    started: float | None = None
    done: float | None = None
    failing: float | None = None
    note: str = ""  # why it is failing, for the message
    queued: bool = False  # could start now but for the stage's limits (a deploy slot)


def _names(hostnames: Sequence[str]) -> str:
    shown = ", ".join(sorted(hostnames)[:NAMES_SHOWN])
    more = len(hostnames) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _failing_note(tracks: Sequence[_Track]) -> str:
    notes = [t.note for t in tracks if t.failing is not None and t.done is None]
    text = "; ".join(notes[:NAMES_SHOWN])
    return text + (f"; and {len(notes) - NAMES_SHOWN} more failing" if len(notes) > NAMES_SHOWN else "")


def _summary(verb: str, tracks: Sequence[_Track],
             groups: Sequence[tuple[str, Sequence[str]]]) -> str:
    """"3 of 8 VERB; LABEL: hosts; ...; what fails", leaving out empty groups."""
    parts = [f"{len(tracks) - [t.done for t in tracks].count(None)} of {len(tracks)} {verb}"]
    parts += [f"{label}: {_names(hosts)}" for label, hosts in groups if hosts]
    failing = _failing_note(tracks)
    return "; ".join(parts + ([failing] if failing else []))


def _counted(verb: str, tracks: Sequence[_Track], queue: str = "waiting for a deploy slot") -> str:
    """queue: what the machines that could start wait for (a slot, or the first manager)."""
    busy = [t.hostname for t in tracks if t.done is None and t.started is not None]
    queued = [t.hostname for t in tracks if t.done is None and t.started is None and t.queued]
    return _summary(verb, tracks, [("in progress", busy), (queue, queued)])


# The states first_entry looks for, as sets of values built once (per machine they cost).
_LEFT_PENDING = frozenset(s.value for s in MachineState if s is not MachineState.PENDING)
_PREPARE = frozenset({MachineState.PREPARE.value})
_DEPLOY = frozenset({MachineState.DEPLOY.value})
_DEPLOY_ON = frozenset(s.value for s in (MachineState.DEPLOY, *DEPLOYED_STATES))
_READY = frozenset({MachineState.READY.value})

_Failure = tuple[float, str]  # since when, and how, a machine fails


@dataclass(frozen=True)
class _Run:
    """The machine's current run, as the rollout counts it."""

    began: float
    done: int  # items applied
    total: int
    finished: bool


@dataclass(frozen=True)
class MachinePart:
    """One machine's share of every stage and of the rollout. It changes only with the
    machine, its history and the spec, so StatusMemo keeps it between calls; but for a
    `timed` one, whose share depends on the clock (a drain, a Node waited for, a failure
    reported from ahead of the clock), computed anew on every call."""

    machine: Machine
    state: str  # the machine's state's value, read once (an enum's value costs per read)
    registered: _Track | None  # None: the machine is being deleted and takes part in no stage
    approved: _Track | None
    prepared: _Track | None  # None: not started (Pending), or being deleted
    deployed: _Track | None
    node: _Track | None  # None also while it has no Node to wait for
    ready: _Track | None
    run: _Run | None
    timed: bool
    awaiting: bool = False  # Ready with items to run, not admitted into Upgrade yet


def machine_part(spec: ClusterSpec, m: Machine, history: History, now: float) -> MachinePart:
    run = _run(spec, m, history)
    if m.state is MachineState.DELETING:
        return MachinePart(m, m.state.value, None, None, None, None, None, None, run, False)
    registered = _Track(m.hostname, m.created_at, m.created_at, m.created_at)
    approved = _approved_track(history, m)
    if m.state is MachineState.PENDING:
        return MachinePart(m, m.state.value, registered, approved, None, None, None, None, run,
                           False)
    fail = failure(spec, m, now) or drain_failure(spec, m, now)
    prepared = _prepared_track(spec, history, m, now, fail)
    progress = m.progress
    timed = (m.drain is not None or awaits_node(spec, m) or (
        progress is not None and progress.failing_since is not None
        and progress.failing_since > now))
    return MachinePart(m, m.state.value, registered, approved, prepared,
                       _deployed_track(history, m, prepared.done, fail),
                       _node_track(spec, history, m, now), _ready_track(history, m, fail),
                       run, timed, awaiting_upgrade(spec, m))


def _failing(m: Machine, fail: _Failure | None, *states: MachineState) -> tuple[float | None, str]:
    """Since when and how m fails, if it does while in one of states."""
    if fail is not None and m.state in states:
        return fail
    return None, ""


def _approved_track(history: History, m: Machine) -> _Track:
    left_pending = history.first_entry_of(m, _LEFT_PENDING)
    precheck = m.precheck_failures() if m.state is MachineState.PENDING else []
    ready_to_go = m.approved and m.role is not None and not precheck
    return _Track(
        m.hostname, m.created_at,
        started=m.created_at if m.approved else None,
        done=left_pending if left_pending is not None else (m.created_at if ready_to_go else None),
        failing=m.created_at if precheck else None,
        note=f"{m.hostname} fails hard prechecks: {'; '.join(precheck)}" if precheck else "")


def _prepared_track(spec: ClusterSpec, history: History, m: Machine, now: float,
                    fail: _Failure | None) -> _Track:
    entered = history.first_entry_of(m, _PREPARE) or m.state_since
    left = history.first_entry_of(m, _DEPLOY_ON)
    if left is None and m.state is MachineState.PREPARE and \
            machine_step(spec, m, now).status == "done":
        left = m.progress.updated_at if m.progress else m.state_since
    failing, note = _failing(m, fail, MachineState.PREPARE)
    return _Track(m.hostname, entered, entered, left, failing, note)


def _deployed_track(history: History, m: Machine, prepared_at: float | None,
                    fail: _Failure | None) -> _Track:
    """Its part in its role's deploy stage: eligible once prepared, queued until a slot frees."""
    begun = history.first_entry_of(m, _DEPLOY)
    finished = (history.first_entry_of(m, _READY) or m.state_since
                if m.state in DEPLOYED_STATES else None)
    failing, note = _failing(m, fail, MachineState.DEPLOY)
    return _Track(m.hostname, prepared_at, begun, finished, failing, note,
                  queued=prepared_at is not None and begun is None)


def _node_track(spec: ClusterSpec, history: History, m: Machine, now: float) -> _Track | None:
    """A machine's Node once its deploy items are applied: done once it is Ready (a machine
    deployed before Nodes were looked at counts as done since it went Ready); failing again
    while a look finds the Node of a deployed machine not Ready, or gone."""
    down = node_down(spec, m)
    if down is not None:
        return _Track(m.hostname, down.since, down.since, None, down.since,
                      f"{m.hostname}: {down.text}")
    if m.state in DEPLOYED_STATES:
        done = (m.node.ready_since if m.node is not None and m.node.ready_since is not None
                else history.first_entry_of(m, _READY) or m.state_since)
        return _Track(m.hostname, done, done, done)
    wait = node_wait(spec, m, now)
    if wait is None:
        return None
    began = now - wait.waited
    late = None if wait.late_for is None else now - wait.late_for
    return _Track(m.hostname, began, began, None, late, f"{m.hostname}: {wait.text} "
                  f"({wait.waited:.0f}s" + ("; still waiting)" if late is not None else ")"))


def _ready_track(history: History, m: Machine, fail: _Failure | None) -> _Track:
    if m.state is MachineState.READY:
        return _Track(m.hostname, m.state_since, m.state_since, m.state_since)
    begun = (history.first_entry_of(m, _PREPARE) or m.state_since
             if m.state in (MachineState.PREPARE, MachineState.DEPLOY) else m.state_since)
    failing, note = _failing(m, fail, m.state)
    return _Track(m.hostname, begun, begun, None, failing, note)


class _Fleet:
    """What every stage reads, gathered in one pass over the parts (in the machines' order):
    each stage's tracks, of the machines not being deleted (`live`) or of those of them past
    Pending (`started`), and the hostnames the messages name. `clock_read` once an answer
    depends on the clock: such an answer is not kept for a later call."""

    def __init__(self, spec: ClusterSpec, created: float, parts: Sequence[MachinePart],
                 now: float, system: SystemWorkloads | None) -> None:
        self.spec = spec
        self.created = created  # a stage without machines waits since the cluster's creation
        self.now = now
        self.system = system  # kube-system as last looked at; None: not looked at
        self.clock_read = False
        self.registered: list[_Track] = []
        self.approved: list[_Track] = []
        self.prepared: list[_Track] = []
        self.deployed: dict[Role, list[_Track]] = {"manager": [], "worker": []}
        self.nodes: list[_Track] = []
        self.ready: list[_Track] = []
        self.silent: list[str] = []  # live machines not responding
        self.no_role: list[str] = []  # approved, Pending for want of a role
        self.not_ready: dict[str, list[str]] = {}  # started machines by state, but Ready ones
        self.awaiting: list[str] = []  # Ready machines with an upgrade to run
        self.machines = [p.machine for p in parts]
        ready = MachineState.READY.value
        for p in parts:
            if p.timed:
                self.clock_read = True
            if p.registered is None or p.approved is None:
                continue
            m = p.machine
            self.registered.append(p.registered)
            self.approved.append(p.approved)
            if not m.responding:
                self.silent.append(m.hostname)
            if p.prepared is None or p.ready is None:
                if m.approved and m.role is None:
                    self.no_role.append(m.hostname)
                continue
            self.prepared.append(p.prepared)
            self.ready.append(p.ready)
            if p.deployed is not None and m.role is not None:
                self.deployed[m.role].append(p.deployed)
            if p.node is not None:
                self.nodes.append(p.node)
            if p.state != ready:
                self.not_ready.setdefault(p.state, []).append(m.hostname)
            if p.awaiting:
                self.awaiting.append(m.hostname)

    def condition(self, tracks: Sequence[_Track], any_done: bool = False
                  ) -> tuple[StageState, float]:
        """Every machine done (or, with any_done, one): done since the last (first) finished.
        Otherwise failing, in progress or waiting, since the earliest machine that made it so."""
        finished = [t.done for t in tracks if t.done is not None]
        rest = [t for t in tracks if t.done is None]
        if not tracks:
            return "waiting", self.created
        if any_done and finished:
            return "done", min(finished)
        if not rest:
            return "done", max(finished)
        if failing := [t.failing for t in rest if t.failing is not None]:
            return "failing", min(failing)
        if started := [t.started for t in rest if t.started is not None]:
            return "in-progress", min(started)
        eligible = [t.eligible for t in rest]
        if None in eligible:
            self.clock_read = True
        return "waiting", min(self.now if e is None else e for e in eligible)


def _registered(fleet: _Fleet) -> Stage:
    tracks = fleet.registered
    state, since = fleet.condition(tracks)
    if not tracks:
        message = "no machine has registered: create a join token and start agents"
    else:
        silent = fleet.silent
        message = f"{len(tracks)} registered" + (f"; not responding: {_names(silent)}" if silent else "")
    return Stage("registered", "Machines registered", state, since, message)


def _approved(fleet: _Fleet) -> Stage:
    tracks = fleet.approved
    state, since = fleet.condition(tracks)
    if not tracks:
        message = "no machine to approve yet"
    else:
        waiting = [t.hostname for t in tracks if t.started is None and t.failing is None]
        message = _summary("approved", tracks, [("waiting for approval", waiting),
                                                ("waiting for a role", fleet.no_role)])
    return Stage("approved", "Machines approved", state, since, message)


def _prepared(fleet: _Fleet) -> Stage:
    tracks = fleet.prepared
    state, since = fleet.condition(tracks)
    message = _counted("prepared", tracks) if tracks else "no machine approved yet"
    return Stage("prepared", "Machines prepared", state, since, message)


def _first_manager(fleet: _Fleet) -> Stage:
    tracks = fleet.deployed["manager"]
    state, since = fleet.condition(tracks, any_done=True)
    busy = [t.hostname for t in tracks if t.done is None and t.started is not None]
    if not tracks:
        message = "no manager approved yet: approve a machine as manager"
    elif state == "done":
        first = min((t for t in tracks if t.done is not None), key=lambda t: t.done or 0)
        message = f"{first.hostname} runs the control plane"
    elif state == "failing":
        message = _failing_note(tracks)
    else:
        message = f"{busy[0]} deploying" if busy else "waiting for a manager to finish preparing"
    return Stage("first-manager", "First manager deployed", state, since, message)


def _role_deployed(fleet: _Fleet, role: Role, title: str) -> Stage:
    """Workers queue for the first manager until one is deployed (the planner's rule), then
    for their batch's slots."""
    tracks = fleet.deployed[role]
    state, since = fleet.condition(tracks)
    first = role == "worker" and all(t.done is None for t in fleet.deployed["manager"])
    message = _counted(f"{role}s deployed", tracks, *([FIRST_MANAGER_WAIT] if first else [])) \
        if tracks else f"no {role} approved yet"
    return Stage(f"{role}s", title, state, since, message)


def _managers(fleet: _Fleet) -> Stage:
    return _role_deployed(fleet, "manager", "Managers deployed")


def _workers(fleet: _Fleet) -> Stage:
    return _role_deployed(fleet, "worker", "Workers deployed")


def _nodes(fleet: _Fleet) -> Stage | None:
    """None for a cluster without Kubernetes access: its machines wait for no Node."""
    if not kubernetes_access(fleet.spec):
        return None
    tracks = fleet.nodes
    state, since = fleet.condition(tracks)
    if not tracks:
        return Stage("nodes", "Nodes Ready", state, since,
                     "no machine has applied its deploy items yet")
    waiting = [t.note for t in tracks if t.done is None and t.failing is None]
    parts = [f"{len(tracks) - [t.done for t in tracks].count(None)} of {len(tracks)} nodes Ready",
             *waiting[:NAMES_SHOWN], _failing_note(tracks)]
    return Stage("nodes", "Nodes Ready", state, since, "; ".join(p for p in parts if p))


def _ready(fleet: _Fleet) -> Stage:
    tracks = fleet.ready
    state, since = fleet.condition(tracks)
    if not tracks:
        message = "no machine approved yet"
    else:
        message = _summary("Ready", tracks, sorted(fleet.not_ready.items()))
    if state == "done" and fleet.system is not None and not fleet.system.available:
        state, message = "in-progress", f"{message}; {fleet.system.text()}"
    if fleet.awaiting:
        state, message = _upgrade_waits(fleet, state, message)
    upgrading = fleet.awaiting or MachineState.UPGRADE.value in fleet.not_ready
    if upgrading and drains_skipped(fleet.spec):
        message = f"{message}; {NO_ACCESS_SHORT}"
    return Stage("ready", "Cluster ready", state, since, message)


def _upgrade_waits(fleet: _Fleet, state: StageState, message: str) -> tuple[StageState, str]:
    """Machines not at the spec yet, Ready and not upgrading: the cluster is not where the
    spec says until they upgrade, held by a pause (waiting, with the command that resumes), by
    the maintenance windows (waiting, saying when the next opens), by the failure budget (what
    failed already fails the stage) or about to be admitted (in progress, when every other
    machine is Ready)."""
    spec = fleet.spec
    what = f"{_names(fleet.awaiting)} to upgrade to release {spec.release}"
    if spec.settings.upgrade.paused:
        return ("waiting", f"{message}; upgrades are paused: {what} (coordinator upgrade resume "
                f"{spec.name})") if state == "done" else (state, message)
    if spec.settings.upgrade.windows:
        fleet.clock_read = True  # the answer changes as a window opens or closes
    held = upgrade_held(spec, fleet.machines, fleet.now)
    if held is not None:
        return ("waiting" if state == "done" else state), f"{message}; {held}: {what}"
    return ("in-progress" if state == "done" else state), (
        f"{message}; waiting: {what}" if state == "done" else message)


# The stages in the order a rollout reaches them.
_STAGES: tuple[Callable[[_Fleet], Stage | None], ...] = (
    _registered, _approved, _prepared, _first_manager, _managers, _workers, _nodes, _ready)


def stages_of(spec: ClusterSpec, cluster_created: float, parts: Sequence[MachinePart],
              now: float, system: SystemWorkloads | None = None) -> tuple[list[Stage], bool]:
    """The stages (see stages) from the machines' parts, and whether they depend on the clock."""
    fleet = _Fleet(spec, cluster_created, parts, now, system)
    found = [found for stage in _STAGES if (found := stage(fleet)) is not None]
    return found, fleet.clock_read


def stages(spec: ClusterSpec, cluster_created: float, machines: Sequence[Machine],
           history: History, now: float, system: SystemWorkloads | None = None) -> list[Stage]:
    """The rollout's stages in order: registered, approved, prepared, first manager, managers,
    workers, nodes (only with Kubernetes access), ready. A later stage may finish before an
    earlier one only when machines join late (a new worker makes `approved` and `ready` run
    again while `managers` stays done). With system (kube-system's workloads, looked at once
    every machine is Ready), `ready` is done only once they are all available too."""
    parts = [machine_part(spec, m, history, now) for m in machines]
    return stages_of(spec, cluster_created, parts, now, system)[0]


# -- the post-deploy step --------------------------------------------------------------------


@dataclass(frozen=True)
class PostDeploy:
    items: int  # as declared; each with a versionCommand also has its check
    running_on: str | None  # the manager that has the step in its assignment now
    failing: str | None  # its item that fails, attempt and error (a version mismatch says so)


def post_deploy(spec: ClusterSpec, machines: Sequence[Machine]) -> PostDeploy:
    host = post_deploy_host(spec, machines)
    failing = None
    progress = host.progress if host is not None else None
    if host is not None and progress is not None and progress.status == "failed" and \
            progress.item in {i.name for i in phase_items(spec, "manager", "postdeploy")}:
        failing = gave_up_text(host.hostname, progress.item, progress.attempt, progress.error) \
            if progress.gave_up else \
            f"{host.hostname}: {progress.item} failing (attempt {progress.attempt}): " \
            f"{progress.error}"
    return PostDeploy(len(spec.items("manager", "postdeploy")),
                      host.hostname if host is not None else None, failing)


# -- the rollout as a whole ----------------------------------------------------------------

# The phases a machine's current run goes through: deploying machines run prepare then
# deploy; a machine in another working state runs that state's phase (steps.current_run).
_DEPLOY_RUN: tuple[Phase, ...] = ("prepare", "deploy")


def _run(spec: ClusterSpec, m: Machine, history: History) -> _Run | None:
    if m.role is None or m.state is MachineState.PENDING:
        return None
    if m.state in (MachineState.PREPARE, MachineState.DEPLOY, MachineState.READY):
        items = [i for p in _DEPLOY_RUN for i in catalog(spec).items(m.role, p)]
        began = history.first_entry(m, [MachineState.PREPARE]) or m.state_since
    else:
        items = current_run(spec, m)
        began = m.state_since
    finished = m.state is MachineState.READY
    done = len(items) if finished else sum(fingerprint in m.applied for _, fingerprint in items)
    return _Run(began, done, len(items), finished)


@dataclass(frozen=True)
class Progress:
    """The rollout's progress without its estimate: what a kept status keeps of it."""

    done: int
    total: int
    machines: int
    began: float | None  # None: no machine is working

    def at(self, now: float, held: str | None = None) -> Rollout:
        """The progress with the estimate as of now: the pace so far (items applied per second
        since the earliest of them began) holds; serial stages (managers one at a time) make
        it an estimate, not a promise. held (held_by): none at all, the rollout waits."""
        if held is not None:
            return Rollout(self.done, self.total, self.machines, self.began, None, held)
        if self.began is None:
            return Rollout(self.done, self.total, self.machines, None,
                           0.0 if self.machines else None)
        elapsed = now - self.began
        eta = ((self.total - self.done) * elapsed / self.done
               if self.done and elapsed > 0 else None)
        return Rollout(self.done, self.total, self.machines, self.began, eta)


def progress_of(runs: Iterable[_Run | None]) -> Progress:
    """Progress of the machines still working, and of those that started with or after them
    (machines with no run, None, take no part)."""
    found = [r for r in runs if r is not None]
    working = [r for r in found if not r.finished]
    if not working:
        return Progress(sum(r.done for r in found), sum(r.total for r in found), len(found), None)
    began = min(r.began for r in working)
    counted = [r for r in found if r.began >= began or not r.finished]
    return Progress(sum(r.done for r in counted), sum(r.total for r in counted), len(counted),
                    began)


def held_by(spec: ClusterSpec, found: Sequence[Stage]) -> str | None:
    """What keeps the rollout from moving on by itself, so that an estimate of the rest (or
    "done") would mislead: a failing stage (nothing moves until the operator acts on it) or
    upgrades paused with machines still to upgrade. None while it moves."""
    failing = [stage.title for stage in found if stage.state == "failing"]
    if failing:
        return f"stalled: {failing[0]} is failing (its message says what to do)"
    if any(stage.name == "ready" and stage.state == "waiting" for stage in found):
        if spec.settings.upgrade.paused:
            return f"stalled: upgrades are paused (coordinator upgrade resume {spec.name})"
        return "stalled: outside the maintenance windows (settings.upgrade.windows)"
    return None


def rollout(spec: ClusterSpec, machines: Sequence[Machine], history: History,
            now: float, held: str | None = None) -> Rollout:
    """How far the rollout in progress has come, and an estimate of the rest (Progress.at)."""
    return progress_of(_run(spec, m, history) for m in machines).at(now, held)
