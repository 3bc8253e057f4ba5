"""What the reconciler keeps of a cluster between passes, so that a pass reads and plans only
what changed: the cluster's working set (planner.working_set), kept current from the machines
that changed, instead of every machine listed and planned on every pass.

No I/O: the reconciler loads machines and hands them over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from coordinator.domain.model import ROLES, ClusterSpec, Machine, MachineState, deployed_managers
from coordinator.domain.rollout.planner import inert_filter


@dataclass
class ClusterView:
    spec: ClusterSpec
    generation: int  # the spec's: another generation means another view
    checked_until: float  # machines silent since before this were loaded (and marked)
    managers: tuple[str, ...] = ()
    active: dict[str, Machine] = field(default_factory=dict)  # the machines that are not inert
    idle_ready: set[str] = field(default_factory=set)  # inert Ready workers: stand-in candidates
    stand_in: Machine | None = None

    @classmethod
    def load(cls, spec: ClusterSpec, generation: int, machines: Sequence[Machine],
             checked_until: float) -> ClusterView:
        """The view of a cluster from all its machines."""
        view = cls(spec, generation, checked_until, deployed_managers(machines))
        view._place(machines)
        return view

    def update(self, machines: Sequence[Machine], removed: Iterable[str] = ()) -> bool:
        """Take in machines as they are now and the ids of removed ones. False when the view
        can no longer tell inert machines: the deployed managers changed and the spec has
        reconfigure items (every Ready machine may now reconfigure); load the cluster again.
        A machine now of another cluster (back in the pool, domain/pool/) left this one."""
        gone = [m.id for m in machines if m.cluster != self.spec.name]
        machines = [m for m in machines if m.cluster == self.spec.name]
        for machine_id in [*removed, *gone, *(m.id for m in machines)]:
            self.active.pop(machine_id, None)
            self.idle_ready.discard(machine_id)
            if self.stand_in is not None and self.stand_in.id == machine_id:
                self.stand_in = None
        managers = deployed_managers([*self.active.values(),
                                      *(m for m in machines if m.role == "manager")])
        if managers != self.managers and any(self.spec.items(r, "reconfigure") for r in ROLES):
            return False
        self.managers = managers
        self._place(machines)
        return True

    def _place(self, machines: Iterable[Machine]) -> None:
        inert = inert_filter(self.spec, self.managers)
        for machine in machines:
            if not inert(machine):
                self.active[machine.id] = machine
            elif machine.state is MachineState.READY:
                self.idle_ready.add(machine.id)
                if self.stand_in is None:
                    self.stand_in = machine

    def missing_stand_in(self) -> str | None:
        """The id of an inert Ready worker to load when none stands in for them now."""
        if self.stand_in is not None or not self.idle_ready:
            return None
        return next(iter(self.idle_ready))

    def working(self) -> list[Machine]:
        """planner.working_set of the cluster, as of the machines taken in."""
        return [*self.active.values(), *([self.stand_in] if self.stand_in else [])]
