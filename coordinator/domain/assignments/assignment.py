"""What an agent is told to do: its phase, the phase's items and the values its templates
fill in. Pure, so the same inputs always give the same assignment, on any replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.assignments.minting import job_values
from coordinator.domain.model import (
    PHASE_OF_STATE,
    ClusterSpec,
    Machine,
    MachineState,
    deployed_managers,
    items_may_run,
    remedy_running,
)
from coordinator.domain.records import ClusterOutput, StoredCluster
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.specs.outputs import Handed, available, hand_out, secret_names
from coordinator.domain.specs.templating import template_values
from nodeagent.wire.contract import JOB_PHASES, UNJOURNALED_PHASES, Phase
from nodeagent.wire.protocol import Assignment


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
    """The phase whose items the machine runs now, if any. A Ready manager's mint or revoke
    job comes before the post-deploy step: a machine waits to join on it."""
    phase = PHASE_OF_STATE.get(machine.state) if machine.role else None
    if machine.minting is not None and machine.state is MachineState.READY:
        return machine.minting.kind
    if remedy_running(spec, machine):
        return "remedy"
    if not items_may_run(spec, machine):
        return None  # the node is being drained: its upgrade or reset items wait
    if may_host_post_deploy(machine) and post_deploy_host == machine.id:
        return "postdeploy"
    return phase


def running_phases(machine: Machine) -> list[Phase]:
    """Every phase whose items the machine may be running now, whatever the post-deploy
    step's host and its drain: its state's, its mint or revoke job's, and (a Ready manager)
    the post-deploy step's."""
    phases: list[Phase] = [phase] if (phase := PHASE_OF_STATE.get(machine.state)) else []
    if machine.minting is not None and machine.state is MachineState.READY:
        phases.append(machine.minting.kind)
    if machine.remedy_since is not None and machine.state is MachineState.READY:
        phases.append("remedy")
    if may_host_post_deploy(machine):
        phases.append("postdeploy")
    return phases


def assigned_items(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine],
                   post_deploy_host: str | None,
                   kept: Mapping[str, ClusterOutput] | None = None) -> tuple[Phase | None, Handed]:
    """The machine's phase and the items it is handed in it: up to the first one whose
    outputs are not there yet (outputs.hand_out), with the output values they use (kept: the
    outputs the cluster keeps, StoredCluster.outputs)."""
    phase = assigned_phase(spec, machine, post_deploy_host)
    managers = deployed_managers(peers)
    items = [i for i, _ in phase_run(spec, machine, phase, managers)] if phase else []
    if phase in UNJOURNALED_PHASES:
        return phase, Handed(items, {}, ())
    return phase, hand_out(items, available(machine, peers, kept), machine.applied)


def waits_notices(spec: ClusterSpec, machines: Sequence[Machine],
                  post_deploy_host: str | None,
                  kept: Mapping[str, ClusterOutput] | None = None) -> list[Machine]:
    """The machines whose assignment waits for other outputs than it did (Machine.waits), each
    with a new generation: once the outputs an item waited for are produced, its agent fetches
    the assignment that hands it out. machines must hold every manager of the cluster."""
    managers = [m for m in machines if m.role == "manager"]
    noticed = []
    for machine in machines:
        _, handed = assigned_items(spec, machine, managers, post_deploy_host, kept)
        if handed.waits != machine.waits:
            noticed.append(replace(machine, waits=handed.waits,
                                   generation=machine.generation + 1))
    return noticed


def build_assignment(inputs: AssignmentInputs, post_deploy_host: str | None) -> Assignment:
    """The assignment of inputs.machine; post_deploy_host is the id of the manager that is to
    run the post-deploy step (None: none is)."""
    spec, machine, peers = inputs.stored.spec, inputs.machine, inputs.peers
    phase, handed = assigned_items(spec, machine, peers, post_deploy_host, inputs.stored.outputs)
    values = {**template_values(spec, machine, peers), **handed.values}
    if phase in JOB_PHASES and machine.minting is not None:
        values.update(job_values(spec, machine.minting))
    return Assignment(
        machine_id=machine.id,
        generation=machine.generation,
        state=machine.state.value,
        phase=phase,
        items=handed.items,
        applied=sorted(machine.applied),
        values=values,
        secrets=secret_names(spec, values),
        retry=spec.settings.retry,
        proxy=spec.settings.proxy,
        ntp=spec.settings.ntp,
        retries=machine.retries,
        incarnation=machine.incarnation,
    )


def pool_assignment(machine: Machine) -> Assignment:
    """The assignment of a machine in the pool: its state, and nothing to run until a cluster
    claims it (no cluster, so no settings: its agent checks the clock with its own)."""
    return Assignment(machine_id=machine.id, generation=machine.generation,
                      state=machine.state.value, phase=None, incarnation=machine.incarnation)

