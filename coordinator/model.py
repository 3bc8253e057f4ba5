"""Clusters and machines: pure data and the rules that derive what a machine still has to run.

No I/O here: the store persists these, the planner decides on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from nodeagent.protocol import (
    Phase,
    PrecheckReport,
    RetryPolicy,
    SpecModel,
    StateItem,
    Status,
)

Role = Literal["manager", "worker"]
ROLES: tuple[Role, ...] = ("manager", "worker")


class MachineState(StrEnum):
    UNINITIALIZED = "Uninitialized"
    PENDING = "Pending"
    PREPARE = "Prepare"
    DEPLOY = "Deploy"
    READY = "Ready"
    UPGRADE = "Upgrade"
    RECONFIGURE = "Reconfigure"
    DELETING = "Deleting"


# The phase whose items a machine runs in each state.
PHASE_OF_STATE: dict[MachineState, Phase] = {
    MachineState.PREPARE: "prepare",
    MachineState.DEPLOY: "deploy",
    MachineState.UPGRADE: "upgrade",
    MachineState.RECONFIGURE: "reconfigure",
    MachineState.DELETING: "reset",
}


# --- cluster spec (declared in YAML by the operator) ----------------------------------


class NtpSettings(SpecModel):
    servers: list[str] = Field(default_factory=list)
    max_skew_seconds: float = Field(default=2.0, gt=0)


class ProxySettings(SpecModel):
    http: str | None = None
    https: str | None = None
    no_proxy: list[str] = Field(default_factory=list)


class Settings(SpecModel):
    worker_batch_size: int = Field(default=50, ge=1)
    auto_approve: bool = False
    auto_approve_role: Role | None = Field(
        default=None, description="role given to auto-approved machines; None: set by hand"
    )
    heartbeat_timeout_seconds: float = Field(default=30, gt=0)
    ntp: NtpSettings = Field(default_factory=NtpSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)


class MachineTypes(SpecModel):
    manager: list[StateItem] = Field(default_factory=list)
    worker: list[StateItem] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> MachineTypes:
        for role in ROLES:
            seen: set[tuple[str, str]] = set()
            for item in getattr(self, role):
                key = (item.phase, item.name)
                if key in seen:
                    raise ValueError(f"{role}: item {item.name!r} appears twice in phase {item.phase}")
                seen.add(key)
        return self


class ClusterSpec(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    release: str = Field(min_length=1)
    settings: Settings = Field(default_factory=Settings)
    machine_types: MachineTypes

    def items(self, role: Role, phase: Phase) -> list[StateItem]:
        return [i for i in getattr(self.machine_types, role) if i.phase == phase]


# --- machines (created at registration, changed by reports and the planner) ------------


@dataclass(frozen=True)
class Progress:
    """Where a machine is within its current phase, as the agent last reported it."""

    item: str
    attempt: int
    status: str  # running | succeeded | failed
    error: str = ""
    next_retry_at: float | None = None
    updated_at: float = 0.0


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
    applied: frozenset[str] = frozenset()  # fingerprints of items known to be applied
    progress: Progress | None = None
    created_at: float = 0.0
    state_since: float = 0.0
    last_seen: float = 0.0
    generation: int = 1  # grows whenever the agent's assignment changes
    credential_hash: str = ""  # "" when revoked: matches no credential
    credential_expires_at: float | None = None
    responding: bool = True  # false once heartbeats stopped; the state is left as it was

    def with_state(self, state: MachineState, now: float) -> Machine:
        return replace(self, state=state, state_since=now, progress=None,
                       generation=self.generation + 1)

    def precheck_failures(self) -> list[str]:
        """Names and messages of hard checks that failed: such a machine cannot be approved."""
        try:
            report = PrecheckReport.model_validate(self.precheck)
        except ValueError:
            return ["precheck report missing or invalid"]
        return [f"{c.name}: {c.message}" for c in report.checks if c.status is Status.FAIL]


def pending_items(spec: ClusterSpec, machine: Machine, phase: Phase) -> list[StateItem]:
    """Items of phase that this machine has not applied in their current version."""
    if machine.role is None:
        return []
    return [i for i in spec.items(machine.role, phase) if i.fingerprint() not in machine.applied]


def phase_complete(spec: ClusterSpec, machine: Machine) -> bool:
    phase = PHASE_OF_STATE.get(machine.state)
    return phase is not None and not pending_items(spec, machine, phase)
