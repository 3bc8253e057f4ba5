"""The hardware each role needs, as kubeadm's NumCPU and Mem checks enforce it.

One definition serves both sides: the node's `cpu` and `memory` prechecks judge the role in
the agent's config, and the coordinator judges the role a machine is approved as from the
values the node measured (which the checks report under `key`), so the two never disagree.
Standard library only: the coordinator's pure domain imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.wire.contract import Role

MiB = 1024 * 1024


@dataclass(frozen=True)
class Minimum:
    """A quantity every role needs some of: the precheck that measures it, the key of the
    measured value in that check's report data, each role's need, and how the check words a
    measured amount and a need."""

    check: str
    key: str
    need: Mapping[Role, int]
    amount: Callable[[int], str]
    bound: Callable[[int], str]

    def shortfall(self, measured: int, role: Role) -> str | None:
        """Why measured is not enough for role, in the check's words; None when it is."""
        need = self.need[role]
        if measured >= need:
            return None
        return f"{self.amount(measured)}; a {role} needs at least {self.bound(need)}"


CPU = Minimum("cpu", "cpus", {"manager": 2, "worker": 1},
              amount=lambda cpus: f"{cpus} CPU(s)", bound=str)
MEMORY = Minimum("memory", "bytes", {"manager": 1700 * MiB, "worker": 1024 * MiB},
                 amount=lambda total: f"{total // MiB} MiB of memory",
                 bound=lambda total: f"{total // MiB} MiB")
MINIMUMS: tuple[Minimum, ...] = (CPU, MEMORY)
