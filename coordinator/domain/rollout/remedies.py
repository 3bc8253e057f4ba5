"""What a machine's note says and what the operator can do about it, decided once: the status
(`status`, `status --watch`), `machines`, `machines get` and the dashboard all show the note
the API's machine view carries, so a drain that is Blocked, a failing uncordon or a Node that is
not Ready reads the same everywhere, with its remedy. Also the upgrade plan's warnings about
drains that are bound to block.

Pure: computed from the spec, the machine, its step (steps.machine_step) and `now`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from coordinator.domain.durations import duration
from coordinator.domain.model import (
    NO_ACCESS_DRAINS_SKIPPED,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    deployed_manager_machines,
    drains_skipped,
    needs_drain,
    recovery_due,
)
from coordinator.domain.nodes.kubeaccess import NO_KUBECONFIG, kube_access
from coordinator.domain.nodes.maintenance import MAINTENANCE_ANNOTATION
from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL, NodeDown, node_down, provider_id
from coordinator.domain.releases.releases import awaiting_upgrade, to_run
from coordinator.domain.rollout.prerequisites import deploy_gate
from coordinator.domain.rollout.steps import MachineStep, after_attempts, retry_remedy

# The answers POST /v1/machines/M/drain/ACTION takes (coordinator upgrade ACTION M).
DRAIN_ACTIONS = ("retry", "skip", "force")
# A note's actions are paths under the machine's resource, each POSTed as it is (the
# dashboard's buttons): the drain answers.
DRAIN_ANSWERS = tuple(f"drain/{action}" for action in DRAIN_ACTIONS)
# ... and running again an item its agent gave up on (coordinator machines retry M).
RETRY = "retry"
# How to give the coordinator a way to the cluster's API, or do without one.
KUBECONFIG_REMEDY = ("set settings.kubernetes.kubeconfig (a kubeconfig file on the coordinator's "
                     "host) or give a manager item kubeconfigFrom; or set settings.drain.enabled: "
                     "false to upgrade in place, without cordon and drain")
# What a prepared worker waits for while no manager runs the control plane (the planner admits
# workers into Deploy only once one does); the status's Workers stage says it too.
FIRST_MANAGER_WAIT = "waiting for the first manager to be Ready"


@dataclass(frozen=True)
class Note:
    """Why a machine is where it is (text), what the operator can do (remedy: "" when nothing
    is theirs to do), whether it is stuck or failing, and what the API takes for it now: paths
    under /v1/machines/ID to POST (the dashboard's buttons), e.g. `drain/retry`."""

    text: str = ""
    remedy: str = ""
    failing: bool = False
    actions: tuple[str, ...] = ()


def machine_note(spec: ClusterSpec | None, machine: Machine, step: MachineStep, now: float,
                 waits: str = "", precheck_failures: Sequence[str] | None = None,
                 managers: Sequence[Machine] | None = None) -> Note:
    """The note every view shows for machine; waits: what its assignment waits for
    (outputs.waits_text), when anything; precheck_failures: machine.precheck_failures() when
    the caller has them already (judging a report costs more than the rest of the note);
    managers: its cluster's managers (None: not known), which a prepared worker waits for."""
    failures = machine.precheck_failures() if precheck_failures is None else precheck_failures
    note = _why(spec, machine, step, now, waits, failures, managers)
    return note if machine.responding else _silent_note(machine, note, now)


def _silent_note(machine: Machine, note: Note, now: float) -> Note:
    """A machine whose agent stopped answering: for how long, and, unless the note has a
    remedy of its own, what to do; a leaving one waits for its agent to run its reset items,
    or for the operator to remove it without them."""
    host = machine.hostname
    silent = f"NOT RESPONDING for {duration(max(0.0, now - machine.last_seen))}"
    agent = f"start the agent on {host} (systemctl status nodeagent; journalctl -u nodeagent)"
    if machine.state is MachineState.DELETING and not note.remedy:
        return replace(note, text=f"{silent}: its reset items wait for its agent", remedy=(
            f"{agent}; or, if {host} is gone, remove it without its reset items: "
            f"coordinator delete {host} --skip-reset (and reset {host} yourself)"))
    return replace(note, text=f"{silent}; {note.text}" if note.text else silent,
                   remedy=note.remedy or f"{agent}; it goes on once the agent answers")


def _why(spec: ClusterSpec | None, machine: Machine, step: MachineStep, now: float, waits: str,
         failures: Sequence[str], managers: Sequence[Machine] | None) -> Note:
    if not machine.credential_hash:
        return _revoked_note(machine, now)
    held = _prerequisites_note(spec, machine) if step.status == "done" else None
    if held is not None:
        return held
    if failures:
        return Note("prechecks failed: " + "; ".join(failures), failing=True)
    if machine.state is MachineState.PENDING and not machine.approved:
        return Note("waiting for approval")
    if machine.state is MachineState.PENDING and not machine.role:
        return Note("approved; waiting for a role")
    drain = _drain_note(spec, machine, now) if machine.drain is not None else None
    if drain is not None:
        return drain
    if machine.member_stop and machine.state is MachineState.DELETING:
        return _member_note(machine)
    down = node_down(spec, machine) if spec is not None else None
    if down is not None:
        return _node_down_note(machine, down)
    if step.node:
        return _node_wait_note(machine, step)
    if step.gave_up:
        return Note(f"gave up {after_attempts(step.attempt)} "
                    f"(failing for {duration(step.failing_for or 0)}): {step.error}",
                    retry_remedy(machine.hostname), True, (RETRY,))
    if step.status == "failed":
        retry = f", retry in {duration(step.next_retry_in)}" if step.next_retry_in is not None else ""
        return Note(f"failing for {duration(step.failing_for or 0)}{retry}: {step.error}",
                    failing=True)
    if waits:
        return Note(waits)
    if step.status == "done" and machine.state is MachineState.PREPARE:
        return _deploy_wait(machine, managers, now)
    if spec is not None and awaiting_upgrade(spec, machine):
        return _upgrade_wait(spec, machine)
    return Note()


def _deploy_wait(machine: Machine, managers: Sequence[Machine] | None, now: float) -> Note:
    """A prepared machine not admitted into Deploy yet: a worker while no manager runs the
    control plane (for how long, and who would), else one waiting for its slot."""
    if machine.role != "worker" or managers is None or deployed_manager_machines(managers):
        return Note("prepared; waiting for a deploy slot")
    progress = machine.progress
    waited = duration(max(0.0, now - (progress.updated_at if progress else machine.state_since)))
    coming = sorted((m for m in managers if m.state is not MachineState.DELETING),
                    key=lambda m: (m.state is not MachineState.DEPLOY, m.created_at))
    if not coming:
        return Note(f"prepared; {FIRST_MANAGER_WAIT} ({waited}): the cluster has no manager",
                    "approve a machine as a manager: coordinator approve HOSTNAME --role manager")
    first = coming[0]
    return Note(f"prepared; {FIRST_MANAGER_WAIT} ({waited}): {first.hostname} is in "
                f"{first.state.value}", f"nothing while {first.hostname} gets there; if it is "
                f"stuck, its note says why: coordinator machines get {first.hostname}")


def _upgrade_wait(spec: ClusterSpec, machine: Machine) -> Note:
    """A Ready machine with items to run that is not upgrading yet: held by a pause, or
    waiting for its turn (managers one at a time, then workers in batches)."""
    what = (f"the upgrade from release {machine.release} to {spec.release}"
            if machine.release != spec.release else
            f"an upgrade ({len(to_run(spec, machine))} changed items)")
    if spec.settings.upgrade.paused:
        return Note(f"{what} waits: upgrades are paused",
                    f"coordinator upgrade resume {spec.name} (coordinator upgrade plan "
                    f"{spec.name} shows what it runs)")
    return Note(f"{what} waits for its turn: managers one at a time, then workers in batches")


def _revoked_note(machine: Machine, now: float) -> Note:
    """A machine whose credential was revoked: its agent is refused at every call, so nothing
    about it moves until the agent rejoins as this machine with a reissued join string (the
    way out its agent's own log gives) or the machine leaves."""
    host = machine.hostname
    leave = (f"coordinator delete {host} --skip-reset (and reset {host} yourself)"
             if machine.state is MachineState.DELETING else f"coordinator delete {host}")
    rejoin = (f"on {host}, set join: in the agent's config to the string it printed, remove "
              "identity.json from the agent's state dir and restart the agent")
    expires = machine.reissue_expires_at
    if machine.reissue_hash and machine.reissue_used_at is None and expires is not None \
            and expires > now:
        return Note(f"credential revoked; the join string `coordinator machines reissue {host}` "
                    f"printed waits to be used (expires in {duration(expires - now)})",
                    f"{rejoin}; or take the machine out: {leave}", True)
    return Note("credential revoked: its agent is refused until it rejoins as this machine",
                f"coordinator machines reissue {host}, then {rejoin}; or take the machine "
                f"out: {leave}", True)


def _prerequisites_note(spec: ClusterSpec | None, machine: Machine) -> Note | None:
    """A machine whose prepare items are applied, held in Prepare by the gate into Deploy:
    its Kubernetes prerequisites not checked again yet, or failing; None when not held."""
    if machine.state is not MachineState.PREPARE:
        return None
    gate = deploy_gate(spec.settings.kubernetes.version if spec is not None else None,
                       machine.precheck)
    if gate.checked is False:
        return Note("prepared; waiting for its agent to check the Kubernetes prerequisites "
                    "again (nodeagent precheck --prepared)")
    if not gate.unmet:
        return None
    return Note("Kubernetes prerequisites fail after Prepare: "
                + "; ".join(str(u) for u in gate.unmet),
                "; ".join(f"{u.check}: {u.remedy}" for u in gate.unmet)
                + f". The agent on {machine.hostname} checks again on its own; the machine "
                "deploys once they pass", True)


# -- an upgrade's or a removal's drain, and the node steps after it ---------------------------


def drain_failure(spec: ClusterSpec, machine: Machine, now: float) -> tuple[float, str] | None:
    """Since when, and how, the machine's drain or the node step after it is stuck (Blocked, a
    failing uncordon, a node not Ready past its timeout): the status's stages fail on it as
    on a failing item. None when it is not."""
    drain = machine.drain
    if drain is None:
        return None
    note = _drain_note(spec, machine, now)
    if note is None or not note.failing:
        return None
    timeouts = spec.settings.drain
    blocked = drain.started_at if _unreachable(drain) else \
        drain.started_at + timeouts.timeout_seconds  # at once, or once its timeout ran out
    since = (drain.step_error_since if drain.step_error else
             blocked if drain.stage is DrainStage.BLOCKED
             else (drain.uncordoned_at or now) + timeouts.node_ready_timeout_seconds)
    return min(now, since or now), f"{machine.hostname}: {note.text}"


def _unreachable(drain: DrainStatus) -> bool:
    """Whether the drain found no way to the cluster's API: it was blocked at once, and
    nothing was cordoned (the note must not say it was)."""
    return NO_KUBECONFIG in drain.message


def _drain_note(spec: ClusterSpec | None, machine: Machine, now: float) -> Note | None:
    """A drain that holds the machine or fails; None once it is out of the way (the items run)."""
    drain = machine.drain
    assert drain is not None
    host = machine.hostname
    leaving = machine.state is MachineState.DELETING
    if drain.stage is DrainStage.BLOCKED:
        held = "cordoned for" if drain.held else "not cordoned, for"
        return Note(f"drain Blocked (attempt {drain.attempt}, {held} "
                    f"{duration(now - drain.started_at)}): {drain.message}",
                    _blocked_remedy(drain, host, leaving), True, DRAIN_ANSWERS)
    if drain.stage is DrainStage.DRAINING:
        return _draining_note(spec, machine, drain, now)
    if drain.step_error:
        what = "Node deletion" if leaving else "uncordon"
        since = duration(now - (drain.step_error_since or now))
        remedy = KUBECONFIG_REMEDY if NO_KUBECONFIG in drain.step_error else (
            "check that the coordinator reaches the cluster's API with its kubeconfig and may "
            "patch and delete Nodes (kubectl auth can-i patch nodes); it retries on its own")
        return Note(f"{what} failing for {since}, retrying: {drain.step_error}", remedy, True)
    if drain.stage is DrainStage.NOT_READY:
        node = machine.node.name if machine.node is not None and machine.node.name else host
        return Note(f"{drain.message} (uncordoned {duration(now - (drain.uncordoned_at or now))} "
                    "ago)", f"check the kubelet on {host} (journalctl -u kubelet) and `kubectl "
                    f"describe node {node}`; the machine leaves Upgrade once its node is Ready",
                    True)
    if drain.stage is DrainStage.UNCORDONED:
        return Note(f"{drain.message} ({duration(now - (drain.uncordoned_at or now))})")
    if spec is not None and recovery_due(spec, drain) and drain.ready_at is not None:
        left = drain.ready_at + spec.settings.drain.recovery_timeout_seconds - now
        return Note(f"{drain.message} ({duration(max(0.0, left))} of "
                    "drain.recoveryTimeoutSeconds left)", "the next drain waits for them; check "
                    "why they are not Ready (kubectl get pods, kubectl describe pod); past the "
                    "timeout the upgrade goes on without them")
    return None


def _draining_note(spec: ClusterSpec | None, machine: Machine, drain: DrainStatus,
                   now: float) -> Note:
    """A drain under way: how much of its timeout is left; once evictions wait on budgets (or
    fail), the operator may answer at once rather than wait for the timeout."""
    timeout = spec.settings.drain.timeout_seconds if spec is not None else 0.0
    left = f", {duration(drain.started_at + timeout - now)} of its timeout left" if timeout else ""
    text = f"drain Draining (attempt {drain.attempt}{left})" + (
        f": {drain.message}" if drain.message else "")
    if drain.held_by:
        return Note(text, _blocked_remedy(drain, machine.hostname,
                                          machine.state is MachineState.DELETING, waiting=True),
                    actions=DRAIN_ANSWERS)
    if not drain.blocking_pods:
        return Note(text)
    return Note(text, _blocked_remedy(drain, machine.hostname,
                                      machine.state is MachineState.DELETING, waiting=True),
                actions=DRAIN_ANSWERS)


def _blocked_remedy(drain: DrainStatus, host: str, leaving: bool, waiting: bool = False) -> str:
    if NO_KUBECONFIG in drain.message:
        return f"{KUBECONFIG_REMEDY}; then coordinator upgrade retry {host} (or skip {host})"
    then = "reset" if leaving else "upgrade"
    if drain.held_by:
        return (f"the drain begins once {drain.held_by} lets go of the node (its "
                f"{MAINTENANCE_ANNOTATION} annotation removed, or kured's reboot done)"
                + (": wait" if waiting else ", then coordinator upgrade retry " + host)
                + f"; or coordinator upgrade skip {host} to {then} undrained")
    budgets = ", ".join(drain.blocking_budgets)
    free = (f"relax budget {budgets} or move its pods" if budgets else "move the pods named")
    first = "wait, or " if waiting else f"{free}, then "
    return (f"{first}coordinator upgrade retry|skip|force {host} (retry: drain again with a new "
            f"timeout; skip: {then} with the pods left on the node; force: delete the pods, "
            "bypassing their budgets)")


def _member_note(machine: Machine) -> Note:
    """A leaving manager whose etcd member no remaining manager could remove: its reset items
    wait, since wiping its data with the member left would leave etcd a dead voting member."""
    host = machine.hostname
    return Note(f"removal stopped: {machine.member_stop}", (
        "make a remaining manager Ready and answering, or fix what its leave job reports "
        "(coordinator machines logs MANAGER): the removal goes on by itself once the member is "
        f"verified gone. Or remove it by hand on a remaining manager (etcdctl member list; "
        f"etcdctl member remove the ID of {host}), then coordinator delete {host} --skip-reset "
        f"and reset {host} yourself"), True)


# -- a machine in Deploy waiting for its Node -------------------------------------------------


def _node_wait_note(machine: Machine, step: MachineStep) -> Note:
    failing = step.status == "failed"
    text = (f"failing for {duration(step.failing_for or 0)}: " if failing else "") + \
        f"{step.node} ({duration(step.node_waiting or 0)})"
    node = machine.node
    host = machine.hostname
    if node is not None and node.error:
        remedy = KUBECONFIG_REMEDY if NO_KUBECONFIG in node.error else (
            "check that the coordinator reaches the cluster's API with its kubeconfig")
    elif node is not None and node.name:
        remedy = (f"check the kubelet on {host} (journalctl -u kubelet) and `kubectl describe "
                  f"node {node.name}` (its CNI, its conditions); the machine goes Ready once its "
                  "node is")
    elif failing:
        remedy = (f"check that the kubelet on {host} runs and joined, and that its items mark its "
                  f"Node: kubelet --node-labels {MACHINE_ID_LABEL}={machine.id} or --provider-id "
                  f"{provider_id(machine.cluster, machine.id)} (kubectl get nodes --show-labels)")
    else:
        remedy = ""
    return Note(text, remedy, failing)


def _node_down_note(machine: Machine, down: NodeDown) -> Note:
    """A deployed machine whose Node went NotReady or was deleted: it stays in its state."""
    host = machine.hostname
    node = machine.node.name if machine.node is not None else ""
    if node:
        remedy = (f"check the kubelet on {host} (journalctl -u kubelet) and `kubectl describe "
                  f"node {node}`; the status clears once its node is Ready again")
    else:
        remedy = (f"check that the kubelet on {host} runs and its Node still exists with its "
                  f"mark: kubectl get nodes -l {MACHINE_ID_LABEL}={machine.id}")
    return Note(down.text, remedy, True)


# -- the upgrade plan ---------------------------------------------------------------------------


def drain_warnings(spec: ClusterSpec, machines: Sequence[Machine],
                   upgrading: Sequence[Machine]) -> list[str]:
    """What the plan says of the upgrading machines' drains: skipped in a cluster that gives no
    way to its Kubernetes API; blocking where it names one (kubeconfigFrom) that no manager has
    reported yet."""
    if drains_skipped(spec):
        return [NO_ACCESS_DRAINS_SKIPPED] if upgrading else []
    drained = [m.hostname for m in upgrading if needs_drain(spec, m)]
    if not drained or kube_access(spec, machines) is not None:
        return []
    shown = ", ".join(drained[:4]) + (f" and {len(drained) - 4} more" if len(drained) > 4 else "")
    return ["drains will block: no manager has reported the kubeconfig its kubeconfigFrom item "
            f"leaves yet, so the nodes of {shown} cannot be cordoned and drained and each "
            f"would stay in Upgrade with its drain Blocked. To fix: {KUBECONFIG_REMEDY}"]
