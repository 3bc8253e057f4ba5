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
from nodeagent.contract import Phase
from nodeagent.protocol import Assignment


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


def build_assignment(inputs: AssignmentInputs, post_deploy_host: str | None) -> Assignment:
    """The assignment of inputs.machine; post_deploy_host is the id of the manager that is to
    run the post-deploy step (None: none is)."""
    spec, machine, peers = inputs.stored.spec, inputs.machine, inputs.peers
    phase = assigned_phase(spec, machine, post_deploy_host)
    items = (phase_items(spec, machine.role, phase, deployed_managers(peers))
             if machine.role and phase else [])
    return Assignment(
        machine_id=machine.id,
        generation=machine.generation,
        state=machine.state.value,
        phase=phase,
        items=items,
        applied=sorted(machine.applied),
        values=template_values(spec, machine, peers),
        retry=spec.settings.retry,
        proxy=spec.settings.proxy,
        ntp=spec.settings.ntp,
    )


def template_values(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine]) -> dict[str, str]:
    """Values StateItem templates may use: ${cluster.name}, ${machine.ip}, ${managers}, ...
    The cluster's NTP and proxy settings are among them, for items that configure chrony,
    containerd or the kubelet."""
    managers = sorted((m for m in peers if m.role == "manager" and m.approved
                       and m.state is not MachineState.DELETING),
                      key=lambda m: (m.created_at, m.hostname, m.id))
    deployed = [m for m in managers if m.state in
                (MachineState.READY, MachineState.UPGRADE, MachineState.RECONFIGURE)]
    first = (deployed or managers or [None])[0]
    return {
        "cluster.name": spec.name,
        "cluster.release": spec.release,
        "machine.id": machine.id,
        "machine.hostname": machine.hostname,
        "machine.ip": machine.ip or "",
        "machine.role": machine.role or "",
        "managers": ",".join(m.ip or m.hostname for m in managers),
        "managers.hostnames": ",".join(m.hostname for m in managers),
        "managers.first": (first.ip or first.hostname) if first else "",
        "ntp.servers": ",".join(spec.settings.ntp.servers),
        "ntp.maxSkewSeconds": f"{spec.settings.ntp.max_skew_seconds:g}",
        "proxy.http": spec.settings.proxy.http or "",
        "proxy.https": spec.settings.proxy.https or "",
        "proxy.noProxy": ",".join(spec.settings.proxy.no_proxy),
    }
