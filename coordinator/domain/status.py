"""What an operator watching a rollout needs: ordered stage conditions for a cluster, one
function per stage, and how far the rollout in progress has come; where each machine is within
its phase is steps.py's.

Pure: computed from the spec, the machines and their state-change history (the `state` events
the reconciler records), with `now` passed in; nothing is kept between calls but steps.py's
cache. The API serves it; the CLI and dashboard draw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from coordinator.domain.catalog import catalog
from coordinator.domain.model import ClusterSpec, Machine, MachineState, Role, phase_items
from coordinator.domain.nodes import kubernetes_access, node_wait
from coordinator.domain.planner import DEPLOYED_STATES, post_deploy_host
from coordinator.domain.remedies import drain_failure
from coordinator.domain.steps import History, failure, gave_up_text, machine_step, phase_run
from coordinator.domain.workloads import SystemWorkloads
from nodeagent.contract import Phase

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
    eta_seconds: float | None  # None until the pace is known; 0 once nothing is left


# -- stages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Track:
    """One machine's part in one stage."""

    hostname: str
    eligible: float  # since when the stage has waited on this machine
    started: float | None = None
    done: float | None = None
    failing: float | None = None
    note: str = ""  # why it is failing, for the message
    queued: bool = False  # could start now but for the stage's limits (a deploy slot)


def _names(hostnames: Sequence[str]) -> str:
    shown = ", ".join(sorted(hostnames)[:NAMES_SHOWN])
    more = len(hostnames) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _condition(tracks: Sequence[_Track], cluster_since: float,
               any_done: bool = False) -> tuple[StageState, float]:
    """Every machine done (or, with any_done, one): done since the last (first) finished.
    Otherwise failing, in progress or waiting, since the earliest machine that made it so."""
    finished = [t.done for t in tracks if t.done is not None]
    rest = [t for t in tracks if t.done is None]
    if not tracks:
        return "waiting", cluster_since
    if any_done and finished:
        return "done", min(finished)
    if not rest:
        return "done", max(finished)
    if failing := [t.failing for t in rest if t.failing is not None]:
        return "failing", min(failing)
    if started := [t.started for t in rest if t.started is not None]:
        return "in-progress", min(started)
    return "waiting", min(t.eligible for t in rest)


def _failing_note(tracks: Sequence[_Track]) -> str:
    notes = [t.note for t in tracks if t.failing is not None and t.done is None]
    text = "; ".join(notes[:NAMES_SHOWN])
    return text + (f"; and {len(notes) - NAMES_SHOWN} more failing" if len(notes) > NAMES_SHOWN else "")


def _summary(verb: str, tracks: Sequence[_Track],
             groups: Sequence[tuple[str, Sequence[str]]]) -> str:
    """"3 of 8 VERB; LABEL: hosts; ...; what fails", leaving out empty groups."""
    parts = [f"{sum(t.done is not None for t in tracks)} of {len(tracks)} {verb}"]
    parts += [f"{label}: {_names(hosts)}" for label, hosts in groups if hosts]
    failing = _failing_note(tracks)
    return "; ".join(parts + ([failing] if failing else []))


def _counted(verb: str, tracks: Sequence[_Track]) -> str:
    busy = [t.hostname for t in tracks if t.done is None and t.started is not None]
    queued = [t.hostname for t in tracks if t.done is None and t.started is None and t.queued]
    return _summary(verb, tracks, [("in progress", busy), ("waiting for a deploy slot", queued)])


# The states first_entry looks for, as sets of values built once (per machine they cost).
_LEFT_PENDING = frozenset(s.value for s in MachineState if s is not MachineState.PENDING)
_PREPARE = frozenset({MachineState.PREPARE.value})
_DEPLOY = frozenset({MachineState.DEPLOY.value})
_DEPLOY_ON = frozenset(s.value for s in (MachineState.DEPLOY, *DEPLOYED_STATES))
_READY = frozenset({MachineState.READY.value})


@dataclass(frozen=True)
class _Fleet:
    """What every stage reads: the machines not being deleted (`live`), those of them past
    Pending (`started`), and how each started machine fails, found once for all stages."""

    spec: ClusterSpec
    created: float  # the cluster's creation: a stage without machines waits since then
    history: History
    now: float
    live: list[Machine]
    started: list[Machine]
    failures: dict[str, tuple[float, str]]
    system: SystemWorkloads | None  # kube-system as last looked at; None: not looked at

    @classmethod
    def of(cls, spec: ClusterSpec, created: float, machines: Sequence[Machine], history: History,
           now: float, system: SystemWorkloads | None) -> _Fleet:
        live = [m for m in machines if m.state is not MachineState.DELETING]
        started = [m for m in live if m.state is not MachineState.PENDING]
        failures = {m.id: f for m in started
                    if (f := failure(spec, m, now) or drain_failure(spec, m, now)) is not None}
        return cls(spec, created, history, now, live, started, failures, system)

    @cached_property
    def prepared(self) -> dict[str, _Track]:
        """Each started machine's prepare track by id, in order: computed once, as the prepared
        stage and both deploy stages ask for it."""
        return {m.id: _prepared_track(self, m) for m in self.started}

    def failing(self, m: Machine, states: Iterable[MachineState]) -> tuple[float | None, str]:
        """Since when and how m fails, if it does while in one of states."""
        if m.id in self.failures and m.state in states:
            return self.failures[m.id]
        return None, ""


def _registered(fleet: _Fleet) -> Stage:
    tracks = [_Track(m.hostname, m.created_at, m.created_at, m.created_at) for m in fleet.live]
    state, since = _condition(tracks, fleet.created)
    if not tracks:
        message = "no machine has registered: create a join token and start agents"
    else:
        silent = [m.hostname for m in fleet.live if not m.responding]
        message = f"{len(tracks)} registered" + (f"; not responding: {_names(silent)}" if silent else "")
    return Stage("registered", "Machines registered", state, since, message)


def _approved_track(fleet: _Fleet, m: Machine) -> _Track:
    left_pending = fleet.history.first_entry_of(m, _LEFT_PENDING)
    precheck = m.precheck_failures() if m.state is MachineState.PENDING else []
    ready_to_go = m.approved and m.role is not None and not precheck
    return _Track(
        m.hostname, m.created_at,
        started=m.created_at if m.approved else None,
        done=left_pending if left_pending is not None else (m.created_at if ready_to_go else None),
        failing=m.created_at if precheck else None,
        note=f"{m.hostname} fails hard prechecks: {'; '.join(precheck)}" if precheck else "")


def _approved(fleet: _Fleet) -> Stage:
    tracks = [_approved_track(fleet, m) for m in fleet.live]
    state, since = _condition(tracks, fleet.created)
    if not tracks:
        message = "no machine to approve yet"
    else:
        no_role = [m.hostname for m in fleet.live if m.state is MachineState.PENDING and m.approved
                   and m.role is None]
        waiting = [t.hostname for t in tracks if t.started is None and t.failing is None]
        message = _summary("approved", tracks, [("waiting for approval", waiting),
                                                ("waiting for a role", no_role)])
    return Stage("approved", "Machines approved", state, since, message)


def _prepared_track(fleet: _Fleet, m: Machine) -> _Track:
    entered = fleet.history.first_entry_of(m, _PREPARE) or m.state_since
    left = fleet.history.first_entry_of(m, _DEPLOY_ON)
    if left is None and m.state is MachineState.PREPARE and \
            machine_step(fleet.spec, m, fleet.now).status == "done":
        left = m.progress.updated_at if m.progress else m.state_since
    fail, note = fleet.failing(m, [MachineState.PREPARE])
    return _Track(m.hostname, entered, entered, left, fail, note)


def _prepared(fleet: _Fleet) -> Stage:
    tracks = list(fleet.prepared.values())
    state, since = _condition(tracks, fleet.created)
    message = _counted("prepared", tracks) if tracks else "no machine approved yet"
    return Stage("prepared", "Machines prepared", state, since, message)


def _deployed_tracks(fleet: _Fleet, role: Role) -> list[_Track]:
    """The role's machines in Deploy: eligible once prepared, queued until a slot frees."""
    tracks = []
    for m in fleet.started:
        if m.role != role:
            continue
        prepared_at = fleet.prepared[m.id].done
        begun = fleet.history.first_entry_of(m, _DEPLOY)
        finished = (fleet.history.first_entry_of(m, _READY) or m.state_since
                    if m.state in DEPLOYED_STATES else None)
        fail, note = fleet.failing(m, [MachineState.DEPLOY])
        tracks.append(_Track(m.hostname, prepared_at or fleet.now, begun, finished, fail, note,
                             queued=prepared_at is not None and begun is None))
    return tracks


def _first_manager(fleet: _Fleet) -> Stage:
    tracks = _deployed_tracks(fleet, "manager")
    state, since = _condition(tracks, fleet.created, any_done=True)
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
    tracks = _deployed_tracks(fleet, role)
    state, since = _condition(tracks, fleet.created)
    message = _counted(f"{role}s deployed", tracks) if tracks else f"no {role} approved yet"
    return Stage(f"{role}s", title, state, since, message)


def _managers(fleet: _Fleet) -> Stage:
    return _role_deployed(fleet, "manager", "Managers deployed")


def _workers(fleet: _Fleet) -> Stage:
    return _role_deployed(fleet, "worker", "Workers deployed")


def _node_track(fleet: _Fleet, m: Machine) -> _Track | None:
    """A machine's Node once its deploy items are applied: done once it is Ready (a machine
    deployed before Nodes were looked at counts as done since it went Ready)."""
    if m.state in DEPLOYED_STATES:
        done = (m.node.ready_since if m.node is not None and m.node.ready_since is not None
                else fleet.history.first_entry_of(m, _READY) or m.state_since)
        return _Track(m.hostname, done, done, done)
    wait = node_wait(fleet.spec, m, fleet.now)
    if wait is None:
        return None
    began = fleet.now - wait.waited
    late = None if wait.late_for is None else fleet.now - wait.late_for
    return _Track(m.hostname, began, began, None, late, f"{m.hostname}: {wait.text} "
                  f"({wait.waited:.0f}s" + ("; still waiting)" if late is not None else ")"))


def _nodes(fleet: _Fleet) -> Stage | None:
    """None for a cluster without Kubernetes access: its machines wait for no Node."""
    if not kubernetes_access(fleet.spec):
        return None
    tracks = [t for m in fleet.started if (t := _node_track(fleet, m)) is not None]
    state, since = _condition(tracks, fleet.created)
    if not tracks:
        return Stage("nodes", "Nodes Ready", state, since,
                     "no machine has applied its deploy items yet")
    waiting = [t.note for t in tracks if t.done is None and t.failing is None]
    parts = [f"{sum(t.done is not None for t in tracks)} of {len(tracks)} nodes Ready",
             *waiting[:NAMES_SHOWN], _failing_note(tracks)]
    return Stage("nodes", "Nodes Ready", state, since, "; ".join(p for p in parts if p))


def _ready_track(fleet: _Fleet, m: Machine) -> _Track:
    if m.state is MachineState.READY:
        return _Track(m.hostname, m.state_since, m.state_since, m.state_since)
    begun = (fleet.history.first_entry_of(m, _PREPARE) or m.state_since
             if m.state in (MachineState.PREPARE, MachineState.DEPLOY) else m.state_since)
    fail, note = fleet.failing(m, [m.state])
    return _Track(m.hostname, begun, begun, None, fail, note)


def _ready(fleet: _Fleet) -> Stage:
    tracks = [_ready_track(fleet, m) for m in fleet.started]
    state, since = _condition(tracks, fleet.created)
    if not tracks:
        message = "no machine approved yet"
    else:
        by_state: dict[str, list[str]] = {}
        for m in fleet.started:
            if m.state is not MachineState.READY:
                by_state.setdefault(m.state.value, []).append(m.hostname)
        message = _summary("Ready", tracks, sorted(by_state.items()))
    if state == "done" and fleet.system is not None and not fleet.system.available:
        state, message = "in-progress", f"{message}; {fleet.system.text()}"
    return Stage("ready", "Cluster ready", state, since, message)


# The stages in the order a rollout reaches them.
_STAGES: tuple[Callable[[_Fleet], Stage | None], ...] = (
    _registered, _approved, _prepared, _first_manager, _managers, _workers, _nodes, _ready)


def stages(spec: ClusterSpec, cluster_created: float, machines: Sequence[Machine],
           history: History, now: float, system: SystemWorkloads | None = None) -> list[Stage]:
    """The rollout's stages in order: registered, approved, prepared, first manager, managers,
    workers, nodes (only with Kubernetes access), ready. A later stage may finish before an
    earlier one only when machines join late (a new worker makes `approved` and `ready` run
    again while `managers` stays done). With system (kube-system's workloads, looked at once
    every machine is Ready), `ready` is done only once they are all available too."""
    fleet = _Fleet.of(spec, cluster_created, machines, history, now, system)
    return [found for stage in _STAGES if (found := stage(fleet)) is not None]


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
# deploy; a machine in another working state runs that state's phase (steps.phase_run).
_DEPLOY_RUN: tuple[Phase, ...] = ("prepare", "deploy")


def _run(spec: ClusterSpec, m: Machine, history: History) -> tuple[float, int, int, bool] | None:
    """(began, items done, items total, finished) of the machine's current run."""
    if m.role is None or m.state is MachineState.PENDING:
        return None
    if m.state in (MachineState.PREPARE, MachineState.DEPLOY, MachineState.READY):
        items = [i for p in _DEPLOY_RUN for i in catalog(spec).items(m.role, p)]
        began = history.first_entry(m, [MachineState.PREPARE]) or m.state_since
    else:
        items = phase_run(spec, m)
        began = m.state_since
    finished = m.state is MachineState.READY
    done = len(items) if finished else sum(fingerprint in m.applied for _, fingerprint in items)
    return began, done, len(items), finished


def rollout(spec: ClusterSpec, machines: Sequence[Machine], history: History,
            now: float) -> Rollout:
    """Progress of the machines still working, and of those that started with or after them.

    The estimate assumes the pace so far (items applied per second since the earliest of them
    began) holds; serial stages (managers one at a time) make it an estimate, not a promise."""
    runs = [r for m in machines if (r := _run(spec, m, history)) is not None]
    working = [r for r in runs if not r[3]]
    if not working:
        return Rollout(sum(r[1] for r in runs), sum(r[2] for r in runs), len(runs), None,
                       0.0 if runs else None)
    began = min(r[0] for r in working)
    counted = [r for r in runs if r[0] >= began or not r[3]]
    done, total = sum(r[1] for r in counted), sum(r[2] for r in counted)
    elapsed = now - began
    eta = (total - done) * elapsed / done if done and elapsed > 0 else None
    return Rollout(done, total, len(counted), began, eta)
