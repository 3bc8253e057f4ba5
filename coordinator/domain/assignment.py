"""What an agent is told to do: its phase, the phase's items and the values its templates
fill in. Pure, so the same inputs always give the same assignment, on any replica."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.domain.model import (
    PHASE_OF_STATE,
    ClusterSpec,
    Machine,
    MachineState,
    deployed_managers,
    phase_items,
    upgrade_items_may_run,
)
from coordinator.domain.records import StoredCluster
from coordinator.domain.releases import upgrade_run
from coordinator.domain.templating import template_values
from nodeagent.contract import Phase
from nodeagent.protocol import Assignment, StateItem


@dataclass(frozen=True)
class AssignmentInputs:
    """What a machine's assignment is made of: its cluster, itself and the managers."""

    stored: StoredCluster
    machine: Machine
    peers: Sequence[Machine]


def may_host_post_deploy(machine: Machine) -> bool:
    """Only a Ready manager can be the post-deploy step's host: for any other machine the
    host need not be looked up."""
    return machine.state is MachineState.READY and machine.role == "manager"


def assigned_phase(spec: ClusterSpec, machine: Machine, post_deploy_host: str | None) -> Phase | None:
    """The phase whose items the machine runs now, if any."""
    phase = PHASE_OF_STATE.get(machine.state) if machine.role else None
    if machine.state is MachineState.UPGRADE and not upgrade_items_may_run(spec, machine):
        return None  # the node is being drained: its upgrade items wait
    if may_host_post_deploy(machine) and post_deploy_host == machine.id:
        return "postdeploy"
    return phase


def phase_run(spec: ClusterSpec, machine: Machine, phase: Phase,
              peers: Sequence[Machine]) -> list[StateItem]:
    """The items machine runs in phase, whose cluster's machines include peers (the managers
    among them are those reconfigure items are versioned by): the one place they are chosen,
    so that what `cluster render` shows is what the assignment carries. An upgrade runs what
    changed since the machine last ran (releases.upgrade_run), not only upgrade items."""
    if machine.role is None:
        return []
    if phase == "upgrade":
        return [item for item, _ in upgrade_run(spec, machine)]
    return phase_items(spec, machine.role, phase, deployed_managers(peers))


def build_assignment(inputs: AssignmentInputs, post_deploy_host: str | None) -> Assignment:
    """The assignment of inputs.machine; post_deploy_host is the id of the manager that is to
    run the post-deploy step (None: none is)."""
    spec, machine, peers = inputs.stored.spec, inputs.machine, inputs.peers
    phase = assigned_phase(spec, machine, post_deploy_host)
    return Assignment(
        machine_id=machine.id,
        generation=machine.generation,
        state=machine.state.value,
        phase=phase,
        items=phase_run(spec, machine, phase, peers) if phase else [],
        applied=sorted(machine.applied),
        values=template_values(spec, machine, peers),
        retry=spec.settings.retry,
        proxy=spec.settings.proxy,
        ntp=spec.settings.ntp,
    )

