"""A spec's items with their fingerprints, each hashed once per spec: hashing is most of the
work of planning or of a status on a large fleet, and every machine of a role needs the same
lists; and whatever else every machine's assignment derives from the spec alike (derived).
The cache changes no answer; it is the domain's one state besides rate-limit buckets.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from coordinator.domain.model import ClusterSpec, Machine, Role, applies
from nodeagent.wire.contract import Phase
from nodeagent.wire.protocol import StateItem

Entry = tuple[StateItem, str]  # an item and its fingerprint
T = TypeVar("T")


class Catalog:
    """The items of one spec per role and phase, in spec order, with their fingerprints."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._phases: dict[tuple[Role, Phase], list[Entry]] = {}
        self._derived: dict[Callable[[ClusterSpec], Any], Any] = {}

    def items(self, role: Role, phase: Phase) -> list[Entry]:
        key = (role, phase)
        if key not in self._phases:
            self._phases[key] = [(i, i.fingerprint()) for i in self.spec.items(role, phase)]
        return self._phases[key]

    def of(self, machine: Machine, phase: Phase) -> list[Entry]:
        """The items machine runs in phase: its role's that its labels (and whether it is the
        first manager) let run (model.applies)."""
        if machine.role is None:
            return []
        return [(i, f) for i, f in self.items(machine.role, phase) if applies(i, machine)]

    def derived(self, compute: Callable[[ClusterSpec], T]) -> T:
        """compute(spec), computed once per spec (compute must be a pure function of it)."""
        if compute not in self._derived:
            self._derived[compute] = compute(self.spec)
        return self._derived[compute]  # type: ignore[no-any-return]


_RECENT: OrderedDict[int, Catalog] = OrderedDict()


def catalog(spec: ClusterSpec) -> Catalog:
    """The catalog of this very spec object (kept referenced, so its id cannot be reused while
    cached); a few recent ones are kept, as each request or pass reads its specs once."""
    found = _RECENT.get(id(spec))
    if found is None or found.spec is not spec:
        found = _RECENT[id(spec)] = Catalog(spec)
        while len(_RECENT) > 8:
            _RECENT.popitem(last=False)
    return found
