"""A hypothetical fleet: machines that do not exist, so that an operator sees what a spec's
items render to on a cluster of some size before any machine registered (`cluster render
--fleet 3,50`). Every machine is as if deployed (so ${managers} lists every manager) at an
earlier release (so its upgrade runs the spec's upgrade items); manager-1 is the first
manager; every manager is shown minting and revoking the join material of the fleet's last
machine, as any Ready manager may be asked to (fleet_job). Addresses come from the
documentation ranges of RFC 5737, which route nowhere, so a rendered command copied by
mistake reaches no real machine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator.domain.assignments.minting import revoke_items
from coordinator.domain.model import ClusterSpec, Machine, MachineState, Material, MintJob, Role
from coordinator.domain.specs.catalog import catalog
from coordinator.domain.specs.outputs import declared, minted_references

_RANGES = ("192.0.2", "198.51.100", "203.0.113")
MAX_MACHINES = 254 * len(_RANGES)  # one documentation address each


@dataclass(frozen=True)
class Fleet:
    managers: int
    workers: int

    def hostnames(self) -> str:
        """Its machines' hostnames, a range per role: `manager-1..manager-3, worker-1`."""
        return ", ".join(_hostname(role, 1) if count == 1 else
                         f"{_hostname(role, 1)}..{_hostname(role, count)}"
                         for role, count in (("manager", self.managers), ("worker", self.workers))
                         if count)


def parse_fleet(text: str) -> Fleet:
    """`MANAGERS,WORKERS` (e.g. `3,50`), or ValueError saying what is wrong with it."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise ValueError(f"{text!r}: expected MANAGERS,WORKERS, e.g. 3,50")
    fleet = Fleet(int(parts[0]), int(parts[1]))
    if fleet.managers < 1:
        raise ValueError(f"{text!r}: at least one manager (workers deploy once one runs)")
    if fleet.managers + fleet.workers > MAX_MACHINES:
        raise ValueError(f"{text!r}: at most {MAX_MACHINES} machines, one per address of the "
                         "documentation ranges; a bigger fleet renders the same items")
    return fleet


def hypothetical_fleet(spec: ClusterSpec, fleet: Fleet) -> list[Machine]:
    """manager-1.. then worker-1.., each Ready with its prepare and deploy items applied."""
    roles: list[tuple[Role, int]] = [*(("manager", n) for n in range(1, fleet.managers + 1)),
                                     *(("worker", n) for n in range(1, fleet.workers + 1))]
    return [_machine(spec, role, number, index) for index, (role, number) in enumerate(roles)]


def fleet_job(spec: ClusterSpec, fleet: Sequence[Machine], machine: Machine,
              kind: Literal["mint", "revoke"]) -> MintJob | None:
    """The mint or revoke job a manager of the hypothetical fleet is shown running, for the
    fleet's last machine (the last to join): the mint items whose outputs its deploy items
    use, and the revoke items that revoke those, as minting chooses them. None on a worker,
    with no such item, or when the manager is that machine (a fleet of one mints for no
    one)."""
    joiner = fleet[-1]
    minted = tuple(minted_references(spec, [i for i, _ in catalog(spec).of(joiner, "deploy")]))
    held = {name: "" for name, found in declared(spec).items() if found.item.name in minted}
    items = minted if kind == "mint" else revoke_items(spec, Material(
        serial=1, minter=machine.id, requested_at=0.0, items=minted, values=held))
    if machine.role != "manager" or joiner.id == machine.id or not items:
        return None
    assert joiner.role is not None and joiner.ip is not None
    return MintJob(kind=kind, joiner=joiner.id, hostname=joiner.hostname, ip=joiner.ip,
                   role=joiner.role, serial=1, items=items)


def _machine(spec: ClusterSpec, role: Role, number: int, index: int) -> Machine:
    book = catalog(spec)
    deployed = frozenset(f for phase in ("prepare", "deploy") for _, f in book.items(role, phase))
    return Machine(
        id=f"00000000-0000-4000-8000-{index + 1:012d}", cluster=spec.name,
        hostname=_hostname(role, number), ip=f"{_RANGES[index // 254]}.{index % 254 + 1}",
        state=MachineState.READY, role=role, approved=True, applied=deployed,
        created_at=float(index), deploy_order=index + 1 if role == "manager" else 0)


def _hostname(role: str, number: int) -> str:
    return f"{role}-{number}"
