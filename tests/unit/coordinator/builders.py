"""Small builders for clusters and machines, so planner tests read as scenarios."""

from __future__ import annotations

import functools
from dataclasses import replace

from coordinator.domain.model import (
    PHASE_OF_STATE,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    Machine,
    MachineState,
    MachineTypes,
    Role,
    pending_items,
)
from nodeagent.protocol import CheckResult, Phase, PrecheckReport, Severity, StateItem, Status, Summary


def precheck(hostname: str, role: Role = "worker", hard_failure: bool = False) -> dict[str, object]:
    """A precheck report as the agent sends it: all checks pass, or the kernel check fails hard."""
    kernel = Status.FAIL if hard_failure else Status.PASS
    checks = [
        CheckResult(name="os", severity=Severity.HARD, status=Status.PASS, message="ok", duration=0.01),
        CheckResult(name="kernel", severity=Severity.HARD, status=kernel,
                    message="kernel too old" if hard_failure else "ok", duration=0.01),
    ]
    report = PrecheckReport(
        hostname=hostname, role=role, started_at=1.0, duration=0.1, ok=not hard_failure,
        summary=Summary(passed=1 if hard_failure else 2, failed=int(hard_failure)), checks=checks,
    )
    return report.model_dump(by_alias=True)


@functools.cache  # items are frozen; validating them is the slow part of building a spec
def item(name: str, phase: Phase) -> StateItem:
    return StateItem.model_validate({"name": name, "phase": phase,
                                     "action": {"type": "exec", "argv": ["true", name]}})


def items(phase: Phase, count: int, prefix: str = "") -> list[StateItem]:
    return [item(f"{prefix}{phase}-{i}", phase) for i in range(count)]


def cluster(
    manager: list[StateItem] | None = None,
    worker: list[StateItem] | None = None,
    batch: int = 50,
) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "edge",
        "release": "1.0.0",
        "settings": {"workerBatchSize": batch},
        "machineTypes": MachineTypes(manager=manager or [], worker=worker or []),
    })


def machine(
    hostname: str,
    role: Role | None = "worker",
    *,
    approved: bool = True,
    hard_failure: bool = False,
    state: MachineState = MachineState.PENDING,
    created_at: float = 0.0,
    release: str = "",
) -> Machine:
    return Machine(
        id=f"id-{hostname}", cluster="edge", hostname=hostname, ip=None,
        state=state, role=role, approved=approved, created_at=created_at, release=release,
        precheck=precheck(hostname, role or "worker", hard_failure),
    )


def finish_phase(spec: ClusterSpec, m: Machine, managers: tuple[str, ...] = ()) -> Machine:
    """The agent applied every item of the machine's current phase (reconfigure items for the
    given manager list)."""
    phase = PHASE_OF_STATE.get(m.state)
    if phase is None:
        return m
    done = {i.fingerprint() for i in pending_items(spec, m, phase, managers)}
    return replace(m, applied=m.applied | done)


def upgraded_cluster(spec: ClusterSpec, release: str = "2.0.0", **upgrade: object) -> ClusterSpec:
    """spec with upgrade settings changed; at another release, with that release's upgrade
    item (one per role) in place of the previous ones."""
    settings = spec.settings.model_copy(
        update={"upgrade": spec.settings.upgrade.model_copy(update=upgrade)})
    if release == spec.release:
        return spec.model_copy(update={"settings": settings})
    types = MachineTypes(**{
        role: [*(i for i in getattr(spec.machine_types, role) if i.phase != "upgrade"),
               item(f"upgrade-{role}-{release}", "upgrade")]
        for role in ("manager", "worker")})
    return spec.model_copy(update={"release": release, "settings": settings,
                                   "machine_types": types})


def drained(m: Machine, stage: DrainStage = DrainStage.DRAINED) -> Machine:
    """The coordinator's Kubernetes side got the machine's node to stage."""
    return replace(m, drain=DrainStatus(stage, started_at=0.0))
