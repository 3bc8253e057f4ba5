"""Clusters and machines: immutable data (the spec a pydantic model, as the operator writes it;
machines frozen dataclasses) and the rules that derive what a machine still has to run.

Pure: no I/O and no clock (times are arguments); the store persists these, the planner
decides on them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from coordinator.domain.fitness import fitness
from coordinator.domain.kubesettings import KubernetesSettings
from coordinator.domain.poolspec import PoolClaims
from nodeagent.wire.contract import ROLES as ROLES  # the roles, where the model is read
from nodeagent.wire.contract import Role
from nodeagent.wire.protocol import (
    NtpSettings,
    Phase,
    ProxySettings,
    RetryPolicy,
    SpecModel,
    StateItem,
    VersionAction,
)


class MachineState(StrEnum):
    UNINITIALIZED = "Uninitialized"
    PENDING = "Pending"
    PREPARE = "Prepare"
    DEPLOY = "Deploy"
    READY = "Ready"
    UPGRADE = "Upgrade"
    RECONFIGURE = "Reconfigure"
    DELETING = "Deleting"


# The cluster of a machine in the pool (and of a pool join token): it belongs to no cluster
# until one claims it (domain/pool/).
POOL = ""

# The phase whose items a machine runs in each state.
PHASE_OF_STATE: dict[MachineState, Phase] = {
    MachineState.PREPARE: "prepare",
    MachineState.DEPLOY: "deploy",
    MachineState.UPGRADE: "upgrade",
    MachineState.RECONFIGURE: "reconfigure",
    MachineState.DELETING: "reset",
}


# --- cluster spec (declared in YAML by the operator) ----------------------------------


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = get_args(Weekday)  # Monday first, as date.weekday() counts
_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
_SPAN = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?$")
MOST_WINDOW_SECONDS = 7 * 24 * 3600


class UpgradeWindow(SpecModel):
    """When upgrade steps may start (domain/rollout/windows.py)."""

    days: list[Weekday] = Field(
        default_factory=lambda: list(WEEKDAYS),
        min_length=1, description="the days the window opens on")
    start: str = Field(description="when it opens, HH:MM (24-hour) in time_zone")
    duration: str = Field(description="how long it stays open: 4h, 90m, 1h30m (at most 168h)")
    time_zone: str = Field(default="UTC", description="an IANA time zone, e.g. Europe/Berlin")

    @field_validator("start")
    @classmethod
    def _start(cls, value: str) -> str:
        if not _CLOCK.match(value):
            raise ValueError(f"{value!r} must be a time of day as HH:MM, e.g. 22:00")
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        found = _SPAN.match(value)
        seconds = (int(found.group(1) or 0) * 3600 + int(found.group(2) or 0) * 60) if found \
            else 0
        if not 0 < seconds <= MOST_WINDOW_SECONDS:
            raise ValueError(f"{value!r} must be a duration such as 4h, 90m or 1h30m, more "
                             "than nothing and at most 168h")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not a time zone this host knows (an IANA name "
                             "such as Europe/Berlin or UTC)") from None
        return value

    @property
    def duration_seconds(self) -> int:
        found = _SPAN.match(self.duration)
        assert found is not None  # validated
        return int(found.group(1) or 0) * 3600 + int(found.group(2) or 0) * 60


class UpgradeSettings(SpecModel):
    paused: bool = Field(default=False, description="no machine starts an upgrade; running ones finish")
    worker_batch_size: int | None = Field(
        default=None, ge=1, description="workers upgrading at once; None: settings.workerBatchSize")
    max_unavailable_workers: int | None = Field(
        default=None, ge=1,
        description="workers upgrading plus workers not responding, at most; None: no such bound")
    drain_managers: bool = Field(
        default=True, description="cordon and drain managers too (they may carry workloads)")
    windows: list[UpgradeWindow] = Field(
        default_factory=list, description="upgrade steps start only inside one of these; none: "
        "at any time")
    max_failed_upgrades: int | None = Field(
        default=None, ge=0, description="more machines than this whose upgrade failed (an item "
        "given up on) stop the upgrade, naming them; None: no such budget")


class DrainSettings(SpecModel):
    enabled: bool = Field(default=True, description="false: upgrade in place, without cordon/drain")
    timeout_seconds: float = Field(default=600, gt=0)
    grace_period_seconds: int | None = Field(
        default=None, ge=0, description="pod termination grace period; None: each pod's own")
    delete_empty_dir_data: bool = Field(
        default=False, description="evict pods using emptyDir (their data is lost), like kubectl's "
        "--delete-emptydir-data; false: such pods block the drain")
    force: bool = Field(
        default=False, description="evict pods no controller manages (kubectl's --force); false: "
        "such pods block the drain")
    on_timeout: Literal["block", "force"] = Field(
        default="block", description="block: stay cordoned in Upgrade for the operator; force: "
        "delete the pods budgets still protect, bypassing the budgets")
    eviction_retry_seconds: float = Field(
        default=5.0, gt=0, description="first wait after a 429 from a budget; doubles, capped at 30s")
    node_ready_timeout_seconds: float = Field(
        default=300, gt=0, description="after the uncordon, how long the node may take to report "
        "Ready before the status says it does not (the machine stays in Upgrade until it does)")
    recovery_timeout_seconds: float = Field(
        default=300, ge=0, description="once the node is Ready again, how long to wait for the "
        "workloads its drain evicted to be available again (ReplicaSets back to their replicas, "
        "their budgets satisfied) before the machine leaves Upgrade and the next drain may "
        "start; past it, the upgrade goes on and an event names what is not back; 0: no wait")


class EtcdSnapshotSettings(SpecModel):
    keep: int = Field(default=3, ge=1, description="the etcd snapshots the coordinator keeps of "
                      "the cluster, newest first; an older one is deleted when a new one is kept")
    max_size_mib: int = Field(
        default=8192, ge=1, alias="maxSizeMiB", description="the largest snapshot an item may "
        "upload (etcd's own quota is at most 8 GiB); a larger one is refused and its item fails")


class HealthPolicy(SpecModel):
    unhealthy_after_seconds: float | None = Field(
        default=None, gt=0, description="a claimed machine whose Node stays NotReady (or gone), "
        "or whose agent stays silent, this long is replaced from the pool; None: never")
    max_unhealthy: int = Field(
        default=1, ge=0, description="past this many unhealthy machines at once nothing is "
        "remediated (a wider failure: the network, the API server), and the status says why")


class ProvisionSettings(SpecModel):
    held: bool = Field(default=False, description="approved and claimed machines wait in "
                       "Pending until `coordinator cluster provision` releases them")


class ClusterSettings(SpecModel):
    worker_batch_size: int = Field(default=50, ge=1)
    auto_approve: bool = False
    auto_approve_role: Role | None = Field(
        default=None, description="role given to auto-approved machines; None: set by hand"
    )
    heartbeat_timeout_seconds: float = Field(default=30, gt=0)
    ntp: NtpSettings = Field(default_factory=NtpSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    upgrade: UpgradeSettings = Field(default_factory=UpgradeSettings)
    drain: DrainSettings = Field(default_factory=DrainSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    etcd_snapshots: EtcdSnapshotSettings = Field(default_factory=EtcdSnapshotSettings)
    provision: ProvisionSettings = Field(default_factory=ProvisionSettings)
    health: HealthPolicy = Field(default_factory=HealthPolicy)

    @property
    def upgrade_batch(self) -> int:
        return self.upgrade.worker_batch_size or self.worker_batch_size


class MachineTypes(SpecModel):
    manager: list[StateItem] = Field(default_factory=list)
    worker: list[StateItem] = Field(default_factory=list)


class ClusterSpec(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    release: str = Field(min_length=1)
    settings: ClusterSettings = Field(default_factory=ClusterSettings)
    machine_types: MachineTypes
    pool: PoolClaims | None = Field(default=None, description="the managers and workers the "
                                    "cluster claims from the machine pool")

    def items(self, role: Role, phase: Phase) -> list[StateItem]:
        return [i for i in getattr(self.machine_types, role) if i.phase == phase]


# --- machines (created at registration, changed by reports and the planner) ------------


@dataclass(frozen=True)
class ItemProgress:
    """Where a machine is within its current phase, as the agent last reported it."""

    item: str
    attempt: int
    status: str  # running | succeeded | failed
    error: str = ""
    next_retry_at: float | None = None
    updated_at: float = 0.0
    failing_since: float | None = None  # first failure of this item not yet followed by success
    gave_up: bool = False  # the agent stopped retrying it (retry.maxAttempts): domain/assignments/retries.py


class DrainStage(StrEnum):
    DRAINING = "Draining"  # the coordinator cordons the node and evicts its pods
    BLOCKED = "Blocked"  # the drain timed out: cordoned, waiting for the operator
    DRAINED = "Drained"  # no pod left to evict: upgrade items may run
    SKIPPED = "Skipped"  # the operator skipped the rest of the drain: upgrade items may run
    UNCORDONED = "Uncordoned"  # upgrade items applied, node schedulable: waiting for it to be Ready
    NOT_READY = "NodeNotReady"  # not Ready within drain.nodeReadyTimeoutSeconds: still checked
    NODE_READY = "NodeReady"  # uncordoned and Ready: the machine may return to Ready, once
    # the workloads its drain evicted are back (drain.recoveryTimeoutSeconds)
    RECOVERED = "Recovered"  # the evicted workloads available again, or waited for past the
    # timeout: the machine may return to Ready
    NODE_DELETED = "NodeDeleted"  # Deleting: reset items applied, its Node deleted (or it had
    # none): the record may go


# Stages in which the node is empty enough for its upgrade (or reset) items to run.
ITEMS_MAY_RUN = frozenset({DrainStage.DRAINED, DrainStage.SKIPPED, DrainStage.UNCORDONED,
                           DrainStage.NOT_READY, DrainStage.NODE_READY, DrainStage.RECOVERED,
                           DrainStage.NODE_DELETED})


@dataclass(frozen=True)
class DrainStatus:
    """A machine's cordon/drain during Upgrade, or during Deleting until its Node is deleted,
    written by the coordinator's Kubernetes side."""

    stage: DrainStage
    started_at: float  # the drain timeout counts from here, across coordinator restarts
    attempt: int = 1
    force: bool = False  # the operator forced it: budget-protected pods are deleted
    message: str = ""
    blocking_pods: tuple[str, ...] = ()  # namespace/name
    blocking_budgets: tuple[str, ...] = ()  # namespace/name
    evicted: int = 0
    uncordoned_at: float | None = None  # the wait for the node's Ready condition counts from here
    # Why the last request of the node step after the drain (the uncordon, a removal's Node
    # deletion) failed, and since when: it is retried; "" once one succeeds.
    step_error: str = ""
    step_error_since: float | None = None
    # The coordinator holds the Node for maintenance (domain/nodes/maintenance.py): its
    # annotation is on it and the Node is cordoned, by the coordinator or from before.
    held: bool = False
    held_by: str = ""  # who else holds the Node, while the drain waits for them to let go
    # The controllers of the pods the drain evicted ("ReplicaSet default/web-7f9c"): waited
    # for once the node is Ready again, from ready_at.
    workloads: tuple[str, ...] = ()
    ready_at: float | None = None


@dataclass(frozen=True)
class NodeStatus:
    """The machine's Kubernetes Node as the coordinator last found it (the Node its items
    marked: domain/nodes/nodes.py), recorded once its deploy items are applied: what the status
    shows while a machine waits in Deploy for its Node, and the name every Node operation
    uses."""

    waiting_since: float  # when the coordinator began looking for it (deploy items applied)
    name: str = ""  # "" while no Node carries the machine's mark
    ready: bool = False
    reason: str = ""  # the Ready condition's reason and message, as its kubelet posts them
    message: str = ""
    condition: str = ""  # "" when the Node has no Ready condition yet, else its status
    registered_at: float | None = None
    ready_since: float | None = None
    unready_since: float | None = None  # since when looks find it not Ready (or gone)
    # The labels and taints the coordinator last put on it (NodeMetadata.digest): a pass
    # that wants others has the Node patched.
    metadata: str = ""
    error: str = ""  # why the last look could not see the Node (no kubeconfig, API down)


@dataclass(frozen=True)
class Material:
    """Join material minted for one machine (its joiner) by a Ready manager's mint items,
    because the items it runs now use their outputs: requested, minted (values, until
    expires_at), used once the items that use it succeeded, then revoked by the minter's
    revoke items. Expired before it was used, it is minted again with the next serial."""

    serial: int  # the how-manyth minting for this machine: versions the mint items
    minter: str  # id of the manager asked to mint it, and to revoke it
    requested_at: float
    items: tuple[str, ...]  # the mint items whose outputs the machine's items use
    values: dict[str, str] = field(default_factory=dict, repr=False)  # outputs.ITEM.NAME: value
    minted_at: float | None = None
    expires_at: float | None = None
    used_at: float | None = None  # the items that use it succeeded: it is to be revoked
    revoked_at: float | None = None

    @property
    def minted(self) -> bool:
        return self.minted_at is not None


@dataclass(frozen=True)
class MintJob:
    """On a manager: the mint or revoke job it runs for another machine, whose outputs (mint)
    go into that machine's Material, or the leave job that removes a leaving manager's etcd
    member (domain/nodes/removal.py). One at a time per manager."""

    kind: Literal["mint", "revoke", "leave"]
    joiner: str  # the machine it is for
    hostname: str
    ip: str
    role: Role
    serial: int
    items: tuple[str, ...]  # names of the mint (or revoke) items to run
    values: dict[str, str] = field(default_factory=dict, repr=False)  # mint: outputs so far;
    # revoke: the material being revoked
    done: tuple[str, ...] = ()  # names of its items that succeeded

    @property
    def finished(self) -> bool:
        return set(self.items) <= set(self.done)


@dataclass(frozen=True)
class Machine:
    id: str
    cluster: str
    hostname: str
    ip: str | None
    state: MachineState = MachineState.PENDING
    role: Role | None = None
    approved: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    precheck: dict[str, Any] = field(default_factory=dict)
    # Fingerprints of the items whose effect the machine has: those its agent applied, and the
    # upgrade items of the release it deployed or upgraded at (its baseline, never run: they
    # lead where it already is; see releases.py).
    applied: frozenset[str] = frozenset()
    progress: ItemProgress | None = None
    created_at: float = 0.0
    state_since: float = 0.0
    last_seen: float = 0.0
    generation: int = 1  # grows whenever the agent's assignment changes
    credential_hash: str = ""  # "" when revoked: matches no credential
    credential_expires_at: float | None = None
    # The last one-use join string issued to bind a new credential to this record (machines
    # reissue): the hash of its token ("" when none), when it expires and when it was used.
    reissue_hash: str = field(default="", repr=False)
    reissue_expires_at: float | None = None
    reissue_used_at: float | None = None
    responding: bool = True  # false once heartbeats stopped; the state is left as it was
    release: str = ""  # the release it last deployed or upgraded at, or had nothing to run at
    # The settings.kubernetes.version its items last brought it to (domain/releases/versions.py): the
    # spec's when it entered Deploy (its prepare items complete) and when it was recorded at a
    # release; "" before, or when the spec names none.
    kubernetes: str = ""
    managers: tuple[str, ...] = ()  # the deployed managers its deploy/reconfigure items last saw
    # Managers: the order the planner admitted it into Deploy in (1 the first); 0 not yet, or
    # before this was recorded. ${managers.first} and the post-deploy host follow it.
    deploy_order: int = 0
    # The post-deploy step's host as the last reconcile pass found it (planner.
    # assignment_notices): a pass that finds otherwise changes this and the generation.
    post_deploy: bool = False
    drain: DrainStatus | None = None  # only in Upgrade, and Deleting (domain/nodes/removal.py)
    node: NodeStatus | None = None  # its Kubernetes Node, once looked for
    # Only in Upgrade: the fingerprints it was admitted to run, which stay in its upgrade's
    # list once applied (releases.upgrade_run).
    upgrading: frozenset[str] = frozenset()
    # Only in Upgrade: a manager admitted as the first of its release to upgrade the control
    # plane (releases.first_upgrader): it runs the items `when: {firstUpgrader: true}`. Fixed at
    # admission, so its list stays the same while it upgrades.
    first_upgrader: bool = False
    # What an item's kubeconfigFrom reported (managers only): never shown, logged or in events.
    kubeconfig: str = field(default="", repr=False)
    labels: dict[str, str] = field(default_factory=dict)  # set at approval or by `machines label`
    # Managers: the outputs their items produced, "ITEM.NAME": value (secret ones too: never
    # shown, logged or in events; encrypted at rest).
    outputs: dict[str, str] = field(default_factory=dict, repr=False)
    material: Material | None = None  # join material minted for it
    minting: MintJob | None = None  # managers: the mint, revoke or leave job it runs now
    # Deleting managers (domain/nodes/removal.py): its etcd member verified gone by a remaining
    # manager's leave job (its reset items wait for it), or why that cannot be done now.
    member_gone: bool = False
    member_stop: str = ""
    # The values its assignment waits for (outputs not produced yet, join material not minted)
    # as the last reconcile pass found them: a pass that finds otherwise bumps the generation.
    waits: tuple[str, ...] = ()
    # How many times the operator had an item its agent gave up on run again (domain/
    # retries.py): carried in its assignment, a new count starts the item afresh.
    retries: int = 0
    # Pending: the values of its product_uuid and MACs other machines hold, as the operator
    # reads them (domain/machines/clones.py), found at its registration, last report or approval.
    clones: tuple[str, ...] = ()
    # A machine the cluster claimed from the pool: its place there ("worker-2", domain/pool/
    # claims.py), "" for one that registered into the cluster. A claimed machine leaving goes
    # back to the pool once its reset items ran, instead of being removed.
    claim: str = ""
    # How many times it went back to the pool: its agent's journal is of one incarnation, so
    # a machine claimed again runs every item anew (nodeagent/journal.py).
    incarnation: int = 0
    # In the pool: registered with a join token that approves (once its prechecks pass).
    auto_approve: bool = False
    # Deleting to be replaced (domain/pool/remediation.py): why it was found unhealthy. Its
    # reset items are skipped while its agent is silent, and then it is removed, not returned
    # to the pool: a host no one reset is not clean.
    remediation: str = ""
    # Its remedy items (phase remedy, domain/pool/remediation.py): the how-manyth run, handed
    # out since when (None: never), and the items of that run that succeeded.
    remedy_serial: int = 0
    remedy_since: float | None = None
    remedy_done: tuple[str, ...] = ()

    def with_state(self, state: MachineState, now: float) -> Machine:
        return replace(self, state=state, state_since=now, progress=None, drain=None,
                       upgrading=frozenset(), first_upgrader=False,
                       generation=self.generation + 1, post_deploy=False, waits=())

    def precheck_failures(self, role: Role | None = None) -> list[str]:
        """`check: why` of each hard check that stops the machine from running as role (by
        default its own, else the one its node checked): such a machine cannot be approved
        as that role. The role's CPU and memory minimums are judged for it (domain/fitness.py);
        a product_uuid or MAC another machine holds stops it too (domain/machines/clones.py)."""
        return [*fitness(self.precheck, role or self.role).problems, *self.clones]


# A manager in one of these states runs the control plane: workers may join it.
DEPLOYED_STATES = frozenset({MachineState.READY, MachineState.UPGRADE, MachineState.RECONFIGURE})
# A manager in one of these states was admitted into Deploy and is not leaving.
ADMITTED_STATES = DEPLOYED_STATES | {MachineState.DEPLOY}


def ordered(machines: Iterable[Machine]) -> list[Machine]:
    """The order every decision considers machines in, whatever order the store returned."""
    return sorted(machines, key=lambda m: (m.created_at, m.hostname, m.id))


def same_hostname(one: str, other: str) -> bool:
    """Whether two hostnames name the same machine: compared as Kubernetes compares node
    names, lowercased (the kubelet and kubeadm name a Node by the lowercased hostname), so
    W1 and w1 would be one Node. The stores compare lower(hostname) alike."""
    return one.lower() == other.lower()


def address(machine: Machine) -> str:
    """How items reach a machine: its IP, or its hostname when it reported none."""
    return machine.ip or machine.hostname


def deployed_manager_machines(machines: Iterable[Machine]) -> list[Machine]:
    """The managers running the control plane, in registration order."""
    return ordered(m for m in machines if m.role == "manager" and m.state in DEPLOYED_STATES)


def deployed_managers(machines: Iterable[Machine]) -> tuple[str, ...]:
    """Addresses of the managers running the control plane: what ${managers} lists, and what
    a machine's deploy or reconfigure items must have seen, or it reconfigures."""
    return tuple(address(m) for m in deployed_manager_machines(machines))


def admission_order(machine: Machine) -> tuple[int, float, str, str]:
    """Sorts managers in the order the planner admitted them into Deploy; those admitted
    before the order was recorded (0) come first, in registration order, as they used to."""
    return (machine.deploy_order, machine.created_at, machine.hostname, machine.id)


def first_manager(machines: Iterable[Machine], leaving: bool = False) -> Machine | None:
    """The manager that ${managers.first} names: the one the planner chose to deploy first
    (the first to finish Prepare) from the pass that admitted it into Deploy; once it is
    deleted, the one admitted next. None until the planner chose one. With leaving, one that
    is being deleted stays first until its record is gone (its agent may still be running
    what it was given)."""
    return min((m for m in machines if m.role == "manager" and (
        m.state in ADMITTED_STATES
        or (leaving and m.state is MachineState.DELETING and m.deploy_order > 0))),
        key=admission_order, default=None)


def phase_items(spec: ClusterSpec, role: Role, phase: Phase,
                managers: Sequence[str] = ()) -> list[StateItem]:
    """The items a machine of role runs in phase. Reconfigure items are versioned by the
    manager list they apply, so the agent runs them again for every new list (its journal
    skips only an identical item) while an unchanged list never runs them twice. A postdeploy
    item with a versionCommand is followed by its check, versioned by the release: it runs
    once per release, so the installed version is checked again after every upgrade."""
    found = spec.items(role, phase)
    if phase == "postdeploy":
        return [checked for i in found for checked in (i, *_version_check(spec, i))]
    if phase != "reconfigure":
        return found
    digest = hashlib.sha256(",".join(managers).encode()).hexdigest()[:10]
    return [i.model_copy(update={"version": f"{i.version}+managers.{digest}"}) for i in found]


def _version_check(spec: ClusterSpec, item: StateItem) -> list[StateItem]:
    if item.version_command is None:
        return []
    return [StateItem(name=f"{item.name}.version", phase="postdeploy", timeout=item.timeout,
                      version=f"{item.version}+release.{spec.release}",
                      action=VersionAction(type="version", argv=item.version_command,
                                           expect=item.version))]


def is_first_manager(machine: Machine) -> bool:
    """The manager admitted into Deploy first (deploy_order 1): the one that starts the control
    plane. Fixed at admission, so that an item's `when: {firstManager: ...}` never changes for
    a machine afterwards, even once another manager becomes ${managers.first}."""
    return machine.role == "manager" and machine.deploy_order == 1


def applies(item: StateItem, machine: Machine) -> bool:
    """Whether the item's `when` lets it run on machine: every label it names, with its value,
    the first manager or not, and the first upgrader of its release or not, as it asks."""
    when = item.when
    if when is None:
        return True
    if any(machine.labels.get(key) != value for key, value in when.labels.items()):
        return False
    return (when.first_manager is None or when.first_manager == is_first_manager(machine)) and (
        when.first_upgrader is None or when.first_upgrader == machine.first_upgrader)


def machine_items(spec: ClusterSpec, machine: Machine, phase: Phase,
                  managers: Sequence[str] = ()) -> list[StateItem]:
    """The items machine runs in phase: its role's (phase_items) that apply to it."""
    if machine.role is None:
        return []
    return [i for i in phase_items(spec, machine.role, phase, managers) if applies(i, machine)]


def kubeconfig_reporter(machines: Iterable[Machine]) -> Machine | None:
    """The manager whose reported kubeconfig the coordinator uses when the cluster settings
    name none: any manager that reported one, the first (in admission order) that is Ready
    and answers; when none is, one that is deployed and answers, then any that is not
    leaving. So the coordinator moves to another manager's as soon as the one it used is
    deleted, stops answering or leaves Ready, and never depends on the first manager."""
    reporters = sorted((m for m in machines if m.role == "manager" and m.kubeconfig
                        and m.state is not MachineState.DELETING), key=admission_order)
    return next((m for m in reporters if m.state is MachineState.READY and m.responding),
                next((m for m in reporters if m.state in DEPLOYED_STATES and m.responding),
                     next(iter(reporters), None)))


def pending_items(spec: ClusterSpec, machine: Machine, phase: Phase,
                  managers: Sequence[str] = ()) -> list[StateItem]:
    """Items of phase that this machine has not applied in their current version."""
    return [i for i in machine_items(spec, machine, phase, managers)
            if i.fingerprint() not in machine.applied]


def kubernetes_access(spec: ClusterSpec) -> bool:
    """Whether the cluster gives the coordinator a way to its Kubernetes API: a kubeconfig
    file in settings.kubernetes, or a manager item that reports one (kubeconfigFrom). Only
    then does a machine wait in Deploy for its Node and get labels and taints on it, and an
    upgrade drain it; a cluster without either goes Ready on its items alone."""
    return spec.settings.kubernetes.kubeconfig is not None or any(
        i.kubeconfig_from is not None for i in spec.machine_types.manager)


def needs_drain(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether an upgrade of this machine holds, cordons and drains its Kubernetes node first
    (and gives it back after, then waits for it to be Ready): drains are on and the cluster
    gives the coordinator a way to its API (without one, drains are skipped, as the plan,
    `cluster apply` and the status say: NO_ACCESS_DRAINS_SKIPPED)."""
    return spec.settings.drain.enabled and kubernetes_access(spec) and (
        machine.role == "worker" or spec.settings.upgrade.drain_managers)


def recovery_due(spec: ClusterSpec, drain: DrainStatus | None) -> bool:
    """Whether an upgraded node, Ready again, still waits for the workloads its drain evicted
    (drain.recoveryTimeoutSeconds)."""
    return (drain is not None and drain.stage is DrainStage.NODE_READY and bool(drain.workloads)
            and spec.settings.drain.recovery_timeout_seconds > 0)


def node_upgraded(spec: ClusterSpec, drain: DrainStatus | None) -> bool:
    """Whether a drained machine's node step is over: Ready again and its evicted workloads
    back (or waited for long enough)."""
    return drain is not None and (drain.stage is DrainStage.RECOVERED or (
        drain.stage is DrainStage.NODE_READY and not recovery_due(spec, drain)))


def drains_skipped(spec: ClusterSpec) -> bool:
    """Drains are on, but the cluster gives no way to its Kubernetes API: skipped."""
    return spec.settings.drain.enabled and not kubernetes_access(spec)


NO_ACCESS_SHORT = "no Kubernetes access: drains skipped"  # the status's words
NO_ACCESS_DRAINS_SKIPPED = (
    f"{NO_ACCESS_SHORT} (settings.kubernetes.kubeconfig is not set and no "
    "manager item has kubeconfigFrom, so upgrades run in place, without cordon, drain or a "
    "wait for the Node; give one to have nodes drained, or set settings.drain.enabled: false "
    "to say so on purpose)")


def upgrade_items_may_run(spec: ClusterSpec, machine: Machine) -> bool:
    return not needs_drain(spec, machine) or (
        machine.drain is not None and machine.drain.stage in ITEMS_MAY_RUN)


def remedy_items(spec: ClusterSpec, machine: Machine) -> list[StateItem]:
    """The remedy items of the machine's run, versioned by it: each run is its own items, so
    that its agent runs them again and its reports name the run."""
    if machine.role is None:
        return []
    return [i.model_copy(update={"version": f"{i.version}+remedy.{machine.remedy_serial}"})
            for i in spec.items(machine.role, "remedy")]


def remedy_running(spec: ClusterSpec, machine: Machine) -> bool:
    """A Ready machine handed its remedy items, some not yet done."""
    return machine.state is MachineState.READY and machine.remedy_since is not None and any(
        i.name not in machine.remedy_done for i in remedy_items(spec, machine))


def reset_skipped(machine: Machine) -> bool:
    """A machine being replaced whose agent is silent: its reset items cannot run, and are not
    waited for (its Node is deleted and its record removed without them)."""
    return machine.state is MachineState.DELETING and bool(machine.remediation) \
        and not machine.responding


def member_removal_due(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether a leaving manager's etcd member is still to be removed by a remaining manager
    (the spec's leave items, domain/nodes/removal.py) before its reset items wipe its data: it was
    admitted into Deploy (its join may have added a member, even one that died halfway), and
    no leave job has verified the member gone yet."""
    return (machine.state is MachineState.DELETING and machine.role == "manager"
            and machine.deploy_order > 0 and not machine.member_gone
            and bool(spec.items("manager", "leave")))


def items_may_run(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether the machine's node lets the items of its state's phase run: an upgrade's once
    its drain allows (upgrade_items_may_run), a removal's reset items once its drain allows
    (a removal without a drain, in a cluster the coordinator cannot reach, runs them at once)
    and, on a manager, once its etcd member is verified gone (member_removal_due)."""
    if machine.state is MachineState.DELETING:
        return (machine.drain is None or machine.drain.stage in ITEMS_MAY_RUN) \
            and not member_removal_due(spec, machine)
    return machine.state is not MachineState.UPGRADE or upgrade_items_may_run(spec, machine)
