"""Small builders for clusters and machines, so planner tests read as scenarios."""

from __future__ import annotations

import functools
from dataclasses import replace

from coordinator.model import (
    PHASE_OF_STATE,
    ClusterSpec,
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
) -> Machine:
    return Machine(
        id=f"id-{hostname}", cluster="edge", hostname=hostname, ip="10.0.0.1", state=state,
        role=role, approved=approved, created_at=created_at,
        precheck=precheck(hostname, role or "worker", hard_failure),
    )


def finish_phase(spec: ClusterSpec, m: Machine) -> Machine:
    """The agent applied every item of the machine's current phase."""
    phase = PHASE_OF_STATE.get(m.state)
    if phase is None:
        return m
    return replace(m, applied=m.applied | {i.fingerprint() for i in pending_items(spec, m, phase)})
