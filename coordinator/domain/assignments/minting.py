"""Join material minted per joiner, just in time, through the agents the coordinator already
trusts: no inbound access to any node, no SSH.

A machine in Deploy or Upgrade whose pending items use a mint item's outputs is given its own
material: a Ready manager runs the mint items for it (a job, Machine.minting), its outputs go
into that machine's Material and nowhere else, with the mint items' lifetime. Material that
expired before the items using it succeeded is minted again (the next serial). Once they
succeeded, or once the machine no longer needs it (deleted, or the items changed), the
manager's revoke items revoke it. Each manager runs one job at a time; revoking comes first.

The same jobs carry a removal's etcd step (domain/nodes/removal.py): a leaving manager's member is
removed by a remaining Ready manager's leave items, which verify it gone, before the leaving
manager's reset items wipe its data.

Pure: `mint_pass` takes the reconcile pass's machines and `now`, and returns the machines it
changed with the events that say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from coordinator.domain.events import event
from coordinator.domain.model import (
    ADMITTED_STATES,
    ITEMS_MAY_RUN,
    PHASE_OF_STATE,
    ClusterSpec,
    Machine,
    MachineState,
    Material,
    MintJob,
    address,
    admission_order,
    member_removal_due,
    pending_items,
    upgrade_items_may_run,
)
from coordinator.domain.records import Event
from coordinator.domain.releases.releases import to_run
from coordinator.domain.specs.outputs import JOINING_PHASES, declared, minted_references, references
from nodeagent.wire.protocol import DEFAULT_MINT_LIFETIME


def job_values(spec: ClusterSpec, job: MintJob) -> dict[str, str]:
    """What a job's items know of the machine they run for, and (revoke) the material."""
    lifetime = min((i.lifetime for i in spec.items("manager", "mint") if i.name in job.items),
                   default=0.0)
    values = {"joiner.id": job.joiner, "joiner.hostname": job.hostname, "joiner.ip": job.ip,
              "joiner.role": job.role, "mint.lifetimeSeconds": f"{lifetime:.0f}"}
    return {**values, **job.values} if job.kind == "revoke" else values


def needed(spec: ClusterSpec, machine: Machine) -> list[str]:
    """The mint items whose outputs the machine's pending items of its phase use, if it is in a
    phase that joins it (Deploy, Upgrade)."""
    phase = PHASE_OF_STATE.get(machine.state)
    if phase not in JOINING_PHASES or machine.role is None:
        return []
    if machine.state is MachineState.UPGRADE and not upgrade_items_may_run(spec, machine):
        return []  # minted once its node is drained, when its items may run
    if machine.state is MachineState.UPGRADE:
        items = [i for i, _ in to_run(spec, machine)]
    else:
        items = pending_items(spec, machine, phase, machine.managers)
    return minted_references(spec, items)


def revoke_items(spec: ClusterSpec, material: Material) -> tuple[str, ...]:
    """The revoke items that can revoke this material: those whose references it holds all."""
    outputs = declared(spec)
    held = set(material.values)
    return tuple(i.name for i in spec.items("manager", "revoke")
                 if all(n in held for n in references(i) if n in outputs))


@dataclass
class _Pass:
    spec: ClusterSpec
    now: float
    machines: dict[str, Machine]
    changed: dict[str, Machine] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    queue: list[MintJob] = field(default_factory=list)  # jobs to give to a free manager

    def put(self, machine: Machine, notify: bool = True) -> Machine:
        if notify:
            machine = replace(machine, generation=machine.generation + 1)
        self.machines[machine.id] = self.changed[machine.id] = machine
        return machine

    def say(self, job: MintJob, message: str, data: dict[str, object]) -> None:
        """An event about the machine a job is for (it may be gone)."""
        self.events.append(event(self.now, self.spec.name, "join-material", message, data=data,
                                 machine_id=job.joiner, hostname=job.hostname))


@dataclass(frozen=True)
class Minted:
    """What a pass changed: machines (with new generations where their assignment changed)
    and the events that say what happened to join material."""

    machines: list[Machine]
    events: list[Event]


def mint_pass(spec: ClusterSpec, machines: Sequence[Machine], now: float) -> Minted:
    """Finish the jobs that are done, ask for the material machines need now, let go of the
    material no longer needed, and give the jobs to free Ready managers."""
    state = _Pass(spec, now, {m.id: m for m in machines})
    for manager in _managers(state):
        _settle_job(state, manager)
    for machine in sorted(state.machines.values(), key=lambda m: (m.created_at, m.id)):
        _need(state, machine)
    for machine in sorted(state.machines.values(), key=lambda m: (m.created_at, m.id)):
        _leave(state, machine)
    _assign(state)
    return Minted(list(state.changed.values()), state.events)


def _managers(state: _Pass) -> list[Machine]:
    return sorted((m for m in state.machines.values() if m.role == "manager"),
                  key=admission_order)


def _may_run_jobs(machine: Machine) -> bool:
    return machine.role == "manager" and machine.state is MachineState.READY \
        and machine.responding


def _reconfiguring(machine: Machine) -> bool:
    """A manager that will be Ready again once its reconfigure items ran."""
    return machine.role == "manager" and machine.state is MachineState.RECONFIGURE \
        and machine.responding


def _settle_job(state: _Pass, manager: Machine) -> None:
    """A finished job hands its outputs over (mint) or records the revocation; a job whose
    manager left Ready or stopped answering goes back to the queue for another one."""
    job = manager.minting
    if job is None:
        return
    if not job.finished:
        declared_items = {i.name for i in state.spec.items("manager", job.kind)}
        if not _may_run_jobs(manager) or not set(job.items) <= declared_items:
            # Another manager takes it, or (its items left the spec) it is asked for anew.
            # A mint, and a revocation of a machine still here, is asked for again by _need.
            state.put(replace(manager, minting=None))
            if job.kind == "revoke" and job.joiner not in state.machines:
                _revoke(state, job.values, job)
        return
    state.put(replace(manager, minting=None))
    joiner = state.machines.get(job.joiner)
    if job.kind == "leave":
        if joiner is not None:
            state.put(replace(joiner, member_gone=True, member_stop=""))
        state.events.append(event(
            state.now, state.spec.name, "etcd-member", f"etcd member of {job.hostname} removed "
            f"on {manager.hostname} and verified gone: its reset items run",
            data={"by": manager.hostname}, machine_id=job.joiner, hostname=job.hostname))
        return
    material = joiner.material if joiner is not None else None
    current = material is not None and material.serial == job.serial
    if job.kind == "revoke":
        if joiner is not None and material is not None and current:
            state.put(replace(joiner, material=replace(material, values={},
                                                       revoked_at=state.now)), notify=False)
        state.say(job, f"join material of {job.hostname} revoked on {manager.hostname} "
                  f"(minting {job.serial})", {"serial": job.serial, "by": manager.hostname})
        return
    if joiner is None or material is None or not current or material.minted \
            or material.used_at is not None:
        _revoke(state, job.values, job)  # minted for a minting no longer wanted
        return
    lifetime = min((i.lifetime for i in state.spec.items("manager", "mint") if i.name in job.items),
                   default=DEFAULT_MINT_LIFETIME)
    state.put(replace(joiner, material=replace(
        material, values=dict(job.values), minted_at=state.now,
        expires_at=state.now + lifetime)))
    state.say(job, f"join material for {joiner.hostname} minted on {manager.hostname} "
              f"(minting {job.serial}: {', '.join(job.items)}), usable for {lifetime:g}s",
              {"serial": job.serial, "by": manager.hostname, "items": list(job.items),
               "lifetime": lifetime})


def _need(state: _Pass, machine: Machine) -> None:
    """Ask for the material the machine needs now, mint it again when it expired unused, let go
    of what it holds once its items no longer need it, and have used material revoked."""
    need = needed(state.spec, machine)
    material = machine.material
    if not need and material is not None and material.used_at is None:
        # Its items that use it succeeded, or it no longer runs them: used either way.
        keep = material.values if revoke_items(state.spec, material) else {}
        material = replace(material, used_at=state.now, values=keep)
        machine = state.put(replace(machine, material=material), notify=False)
    if need:
        fresh = (material is None or material.used_at is not None
                 or not set(need) <= set(material.items))
        expired = (material is not None and material.minted and material.used_at is None
                   and material.expires_at is not None and state.now >= material.expires_at)
        if expired:
            state.say(_job("mint", machine, material, ()),
                      f"join material of {machine.hostname} expired before its items used it "
                      f"(minting {material.serial}): minted again",
                      {"serial": material.serial})
        if fresh and material is not None and material.values and material.revoked_at is None \
                and not _job_exists(state, machine.id, material.serial, "revoke"):
            _revoke(state, material.values, _job("revoke", machine, material, ()))
        if fresh or expired:
            serial = material.serial + 1 if material is not None else 1
            material = Material(serial=serial, minter="", requested_at=state.now,
                                items=tuple(need))
            machine = state.put(replace(machine, material=material), notify=expired)
        if not material.minted and not _job_exists(state, machine.id, material.serial, "mint"):
            state.queue.append(_job("mint", machine, material, material.items))
    elif material is not None and material.values and material.revoked_at is None \
            and not _job_exists(state, machine.id, material.serial, "revoke"):
        _revoke(state, material.values, _job("revoke", machine, material, ()))


def _leave(state: _Pass, machine: Machine) -> None:
    """Have a remaining manager remove a leaving manager's etcd member once its drain lets its
    reset items run, and record on it why that cannot be done now (machine.member_stop): no
    remaining manager is Ready and answering, or the job fails. A manager leaving with no
    other left (the cluster's last) has no etcd to keep whole: nothing to remove."""
    drained = machine.drain is None or machine.drain.stage in ITEMS_MAY_RUN
    if not member_removal_due(state.spec, machine) or not drained:
        return
    others = [m for m in _managers(state) if m.id != machine.id]
    if not any(m.state in ADMITTED_STATES for m in others):
        state.put(replace(machine, member_gone=True, member_stop=""))
        state.events.append(event(state.now, state.spec.name, "etcd-member", (
            f"no other manager remains: the etcd member of {machine.hostname} leaves with the "
            "cluster's etcd"), machine))
        return
    running = next((m for m in others if m.minting is not None and m.minting.kind == "leave"
                    and m.minting.joiner == machine.id), None)
    if running is None:
        state.queue.append(MintJob(kind="leave", joiner=machine.id, hostname=machine.hostname,
                                   ip=address(machine), role="manager", serial=0,
                                   items=tuple(i.name for i in state.spec.items("manager",
                                                                              "leave"))))
    stop = leave_stop(machine, others, running)
    if stop != machine.member_stop:
        state.put(replace(machine, member_stop=stop), notify=False)
        if stop:
            state.events.append(event(state.now, state.spec.name, "etcd-member",
                                      f"removal of {machine.hostname} stopped: {stop}", machine))


def leave_stop(machine: Machine, others: Sequence[Machine], running: Machine | None) -> str:
    """Why the etcd member of a leaving manager cannot be removed now ("": it is being, or
    will be once a manager is free): the job failing on the manager running it, or no other
    manager Ready and answering to run it. A manager reconfiguring counts as free soon: a
    manager starting to leave changes the manager set, so every remaining one runs its
    reconfigure items (the kubeadm profile's local API proxy) before it can take the job; the
    removal waits for it, and is not shown as stopped meanwhile."""
    progress = running.progress if running is not None else None
    if running is not None and running.minting is not None and progress is not None \
            and progress.status == "failed" and progress.item in running.minting.items:
        return (f"the removal of its etcd member {machine.hostname} fails on "
                f"{running.hostname}: {progress.error}")
    if running is None and not any(_may_run_jobs(m) or _reconfiguring(m) for m in others):
        return (f"no remaining manager is Ready and answering to remove its etcd member "
                f"{machine.hostname}")
    return ""


def _job(kind: Literal["mint", "revoke"], machine: Machine, material: Material,
         items: tuple[str, ...]) -> MintJob:
    assert machine.role is not None
    return MintJob(kind=kind, joiner=machine.id,
                   hostname=machine.hostname, ip=address(machine), role=machine.role,
                   serial=material.serial, items=items)


def _revoke(state: _Pass, values: dict[str, str], job: MintJob) -> None:
    """Queue the revocation of material whose values are values, if the spec revokes any."""
    revoking = revoke_items(state.spec, Material(job.serial, "", 0.0, (), values))
    if revoking:
        state.queue.append(replace(job, kind="revoke", items=revoking, values=dict(values),
                                   done=()))


def _job_exists(state: _Pass, joiner: str, serial: int, kind: str) -> bool:
    return any(m.minting is not None and m.minting.joiner == joiner
               and m.minting.serial == serial and m.minting.kind == kind
               for m in state.machines.values())


def _assign(state: _Pass) -> None:
    """Give the queued jobs to Ready managers without one, revocations first, never to the
    machine a job is for; what finds no manager is queued again by the next pass."""
    free = [m for m in _managers(state) if _may_run_jobs(m) and m.minting is None]
    queued = {(j.kind, j.joiner, j.serial): j for j in state.queue}  # each job once
    for job in sorted(queued.values(), key=lambda j: j.kind != "revoke"):
        manager = next((m for m in free if m.id != job.joiner), None)
        if manager is None:
            continue
        free.remove(manager)
        state.put(replace(manager, minting=job))
        joiner = state.machines.get(job.joiner)
        if job.kind == "mint" and joiner is not None and joiner.material is not None:
            state.put(replace(joiner, material=replace(joiner.material, minter=manager.id)),
                      notify=False)
