"""What an operator watching a rollout needs: ordered stage conditions for a cluster, where each
machine is within its phase, and how far the rollout in progress has come.

Pure: computed from the spec, the machines and their state-change history (the `state` events
the reconciler records), with `now` passed in. The API serves it; the CLI and dashboard draw it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator.domain.model import PHASE_OF_STATE, ClusterSpec, Machine, MachineState, Role, phase_items
from coordinator.domain.planner import DEPLOYED_STATES, post_deploy_host
from coordinator.domain.records import Event
from nodeagent.contract import Phase

StageState = Literal["waiting", "in-progress", "failing", "done"]
StepStatus = Literal["running", "failed", "waiting", "done"]

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
class Step:
    """Where a machine is within its current phase: item `index` of `total`."""

    phase: Phase | None
    done: int
    total: int
    index: int  # 1-based position of `item` in the phase; 0 when there is none
    item: str | None
    attempt: int
    status: StepStatus | None  # None: the state runs no phase (Pending, Ready)
    state_elapsed: float
    item_elapsed: float | None
    failing_for: float | None
    next_retry_in: float | None
    error: str


@dataclass(frozen=True)
class Rollout:
    """Items applied out of those the rollout in progress runs, and an estimate of the rest."""

    done: int
    total: int
    machines: int  # machines taking part
    started_at: float | None
    eta_seconds: float | None  # None until the pace is known; 0 once nothing is left


class History:
    """Each machine's state changes, oldest first, from the `state` events."""

    def __init__(self, events: Iterable[Event]) -> None:
        self._entries: dict[str, list[tuple[float, str]]] = {}
        for event in events:
            if event.kind == "state" and event.machine and event.data.get("to"):
                self._entries.setdefault(event.machine, []).append((event.time, event.data["to"]))

    def first_entry(self, machine: Machine, states: Iterable[MachineState]) -> float | None:
        """When the machine first entered any of states; its state_since when it is in one of
        them and the history has no record (e.g. pruned)."""
        wanted = {s.value for s in states}
        found = next((t for t, to in self._entries.get(machine.id, ()) if to in wanted), None)
        if found is None and machine.state.value in wanted:
            return machine.state_since
        return found


# -- per machine -------------------------------------------------------------------------


class _Catalog:
    """(name, fingerprint) of a spec's items per role and phase, each hashed once: hashing is
    most of the work of a status on a large fleet, and every machine needs the same lists."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._phases: dict[tuple[Role, Phase], list[tuple[str, str]]] = {}

    def items(self, role: Role, phase: Phase) -> list[tuple[str, str]]:
        key = (role, phase)
        if key not in self._phases:
            self._phases[key] = [(i.name, i.fingerprint()) for i in self.spec.items(role, phase)]
        return self._phases[key]


_RECENT: OrderedDict[int, _Catalog] = OrderedDict()


def _catalog(spec: ClusterSpec) -> _Catalog:
    """The catalog of this very spec object (kept referenced, so its id cannot be reused while
    cached); a few recent ones are kept, as each request reads its specs once."""
    found = _RECENT.get(id(spec))
    if found is None or found.spec is not spec:
        found = _RECENT[id(spec)] = _Catalog(spec)
        while len(_RECENT) > 8:
            _RECENT.popitem(last=False)
    return found


def machine_step(spec: ClusterSpec | None, machine: Machine, now: float) -> Step:
    phase = PHASE_OF_STATE.get(machine.state) if machine.role else None
    items = (_catalog(spec).items(machine.role, phase)
             if spec is not None and phase and machine.role else [])
    names = [name for name, _ in items]
    pending = [name for name, fingerprint in items if fingerprint not in machine.applied]
    progress = machine.progress
    state_elapsed = max(0.0, now - machine.state_since)
    active = (progress is not None and progress.status in ("running", "failed")
              and progress.item in pending)
    if phase is None:
        status: StepStatus | None = None
        item = None
    elif active and progress is not None:
        status, item = ("running" if progress.status == "running" else "failed"), progress.item
    elif pending:
        status, item = "waiting", pending[0]
    else:
        status, item = "done", None
    failed = active and progress is not None and progress.status == "failed"
    failing_since = progress.failing_since if active and progress is not None else None
    return Step(
        phase=phase,
        done=len(items) - len(pending),
        total=len(items),
        index=names.index(item) + 1 if item else 0,
        item=item,
        attempt=progress.attempt if active and progress is not None else 0,
        status=status,
        state_elapsed=state_elapsed,
        item_elapsed=max(0.0, now - progress.updated_at)
        if status == "running" and progress is not None else None,
        failing_for=max(0.0, now - failing_since) if failing_since is not None else None,
        next_retry_in=max(0.0, progress.next_retry_at - now)
        if failed and progress is not None and progress.next_retry_at is not None else None,
        error=progress.error if failed and progress is not None else "",
    )


def _failure(spec: ClusterSpec, machine: Machine, now: float) -> tuple[float, str] | None:
    """Since when, and how, the machine's current item fails; None when it does not."""
    step = machine_step(spec, machine, now)
    if step.failing_for is None:
        return None
    return now - step.failing_for, (f"{machine.hostname}: {step.item} failing "
                                    f"(attempt {step.attempt}): {step.error}".rstrip(": "))


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


def _combine(name: str, title: str, tracks: Sequence[_Track], cluster_since: float,
             messages: Callable[[StageState, Sequence[_Track]], str], any_done: bool = False,
             ) -> Stage:
    """Every machine done (or, with any_done, one): done since the last (first) finished.
    Otherwise failing, in progress or waiting, since the earliest machine that made it so."""
    finished = [t for t in tracks if t.done is not None]
    rest = [t for t in tracks if t.done is None]
    state: StageState
    if not tracks:
        state, since = "waiting", cluster_since
    elif any_done and finished:
        state, since = "done", min(t.done for t in finished if t.done is not None)
    elif not rest:
        state, since = "done", max(t.done for t in finished if t.done is not None)
    elif failing := [t.failing for t in rest if t.failing is not None]:
        state, since = "failing", min(failing)
    elif started := [t.started for t in rest if t.started is not None]:
        state, since = "in-progress", min(started)
    else:
        state, since = "waiting", min(t.eligible for t in rest)
    return Stage(name, title, state, since, messages(state, tracks))


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


def stages(spec: ClusterSpec, cluster_created: float, machines: Sequence[Machine],
           history: History, now: float) -> list[Stage]:
    """The rollout's stages in order: registered, approved, prepared, first manager, managers,
    workers, ready. A later stage may finish before an earlier one only when machines join
    late (a new worker makes `approved` and `ready` run again while `managers` stays done)."""
    live = [m for m in machines if m.state is not MachineState.DELETING]
    started = [m for m in live if m.state is not MachineState.PENDING]
    failures = {m.id: f for m in started if (f := _failure(spec, m, now)) is not None}

    def failing(m: Machine, states: Iterable[MachineState]) -> tuple[float | None, str]:
        if m.id in failures and m.state in states:
            return failures[m.id]
        return None, ""

    registered = [_Track(m.hostname, m.created_at, m.created_at, m.created_at) for m in live]

    approved: list[_Track] = []
    for m in live:
        left_pending = history.first_entry(m, set(MachineState) - {MachineState.PENDING})
        precheck = m.precheck_failures() if m.state is MachineState.PENDING else []
        ready_to_go = m.approved and m.role is not None and not precheck
        approved.append(_Track(
            m.hostname, m.created_at,
            started=m.created_at if m.approved else None,
            done=left_pending if left_pending is not None else (m.created_at if ready_to_go else None),
            failing=m.created_at if precheck else None,
            note=f"{m.hostname} fails hard prechecks: {'; '.join(precheck)}" if precheck else ""))

    def prepared_track(m: Machine) -> _Track:
        entered = history.first_entry(m, [MachineState.PREPARE]) or m.state_since
        left = history.first_entry(m, [MachineState.DEPLOY, *DEPLOYED_STATES])
        if left is None and m.state is MachineState.PREPARE and \
                machine_step(spec, m, now).status == "done":
            left = m.progress.updated_at if m.progress else m.state_since
        fail, note = failing(m, [MachineState.PREPARE])
        return _Track(m.hostname, entered, entered, left, fail, note)

    prepared = [prepared_track(m) for m in started]

    def deployed_track(m: Machine) -> _Track:
        prepared_at = prepared_track(m).done
        begun = history.first_entry(m, [MachineState.DEPLOY])
        finished = (history.first_entry(m, [MachineState.READY]) or m.state_since
                    if m.state in DEPLOYED_STATES else None)
        fail, note = failing(m, [MachineState.DEPLOY])
        return _Track(m.hostname, prepared_at or now, begun, finished, fail, note,
                      queued=prepared_at is not None and begun is None)

    managers = [deployed_track(m) for m in started if m.role == "manager"]
    workers = [deployed_track(m) for m in started if m.role == "worker"]

    def ready_track(m: Machine) -> _Track:
        if m.state is MachineState.READY:
            return _Track(m.hostname, m.state_since, m.state_since, m.state_since)
        begun = (history.first_entry(m, [MachineState.PREPARE]) or m.state_since
                 if m.state in (MachineState.PREPARE, MachineState.DEPLOY) else m.state_since)
        fail, note = failing(m, [m.state])
        return _Track(m.hostname, begun, begun, None, fail, note)

    ready = [ready_track(m) for m in started]
    since = cluster_created

    def registered_message(state: StageState, tracks: Sequence[_Track]) -> str:
        if not tracks:
            return "no machine has registered: create a join token and start agents"
        silent = [m.hostname for m in live if not m.responding]
        return f"{len(tracks)} registered" + (f"; not responding: {_names(silent)}" if silent else "")

    def approved_message(state: StageState, tracks: Sequence[_Track]) -> str:
        if not tracks:
            return "no machine to approve yet"
        no_role = [m.hostname for m in live if m.state is MachineState.PENDING and m.approved
                   and m.role is None]
        waiting = [t.hostname for t in tracks if t.started is None and t.failing is None]
        return _summary("approved", tracks, [("waiting for approval", waiting),
                                             ("waiting for a role", no_role)])

    def prepared_message(state: StageState, tracks: Sequence[_Track]) -> str:
        return _counted("prepared", tracks) if tracks else "no machine approved yet"

    def first_manager_message(state: StageState, tracks: Sequence[_Track]) -> str:
        if not tracks:
            return "no manager approved yet: approve a machine as manager"
        if state == "done":
            first = min((t for t in tracks if t.done is not None), key=lambda t: t.done or 0)
            return f"{first.hostname} runs the control plane"
        busy = [t.hostname for t in tracks if t.done is None and t.started is not None]
        if state == "failing":
            return _failing_note(tracks)
        return f"{busy[0]} deploying" if busy else "waiting for a manager to finish preparing"

    def role_message(role: str) -> Callable[[StageState, Sequence[_Track]], str]:
        def message(state: StageState, tracks: Sequence[_Track]) -> str:
            if not tracks:
                return f"no {role} approved yet"
            return _counted(f"{role}s deployed", tracks)
        return message

    def ready_message(state: StageState, tracks: Sequence[_Track]) -> str:
        if not tracks:
            return "no machine approved yet"
        by_state: dict[str, list[str]] = {}
        for m in started:
            if m.state is not MachineState.READY:
                by_state.setdefault(m.state.value, []).append(m.hostname)
        return _summary("Ready", tracks, sorted(by_state.items()))

    return [
        _combine("registered", "Machines registered", registered, since, registered_message),
        _combine("approved", "Machines approved", approved, since, approved_message),
        _combine("prepared", "Machines prepared", prepared, since, prepared_message),
        _combine("first-manager", "First manager deployed", managers, since,
                 first_manager_message, any_done=True),
        _combine("managers", "Managers deployed", managers, since, role_message("manager")),
        _combine("workers", "Workers deployed", workers, since, role_message("worker")),
        _combine("ready", "Cluster ready", ready, since, ready_message),
    ]


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
        failing = f"{host.hostname}: {progress.item} failing (attempt {progress.attempt}): " \
                  f"{progress.error}"
    return PostDeploy(len(spec.items("manager", "postdeploy")),
                      host.hostname if host is not None else None, failing)


# -- the rollout as a whole ----------------------------------------------------------------

# The phases a machine's current run goes through: deploying machines run prepare then
# deploy; a machine in another working state runs that state's phase.
_DEPLOY_RUN: tuple[Phase, ...] = ("prepare", "deploy")


def _run(spec: ClusterSpec, m: Machine, history: History) -> tuple[float, int, int, bool] | None:
    """(began, items done, items total, finished) of the machine's current run."""
    if m.role is None or m.state is MachineState.PENDING:
        return None
    if m.state in (MachineState.PREPARE, MachineState.DEPLOY, MachineState.READY):
        items = [i for p in _DEPLOY_RUN for i in _catalog(spec).items(m.role, p)]
        began = history.first_entry(m, [MachineState.PREPARE]) or m.state_since
    else:
        phase = PHASE_OF_STATE[m.state]
        items = _catalog(spec).items(m.role, phase)
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
