"""The complete change one operation or loop makes, as one value: every operation and loop of
the service (the reconcile pass and the Node watch included) loads what it needs, asks one
pure decision for a `Change`, has the store write it in one transaction (`Store.apply`) and
then wakes whom it names. Nothing of it is written unless all
of it is, so no operation leaves a crash window between two writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coordinator.domain.model import Machine
from coordinator.domain.records import ClusterOutput, Event, StoredCluster


@dataclass(frozen=True)
class Retarget:
    """The move target replaced: the JSON document agents are told (None: cleared)."""

    doc: str | None


@dataclass(frozen=True)
class TokenUse:
    """A registration's use of a join token (by its hash), counted only if the token is
    usable at `at` (not revoked, not expired, uses left); else nothing of the change is
    written (Store.apply raises TokenRefused)."""

    hash: str
    at: float


@dataclass(frozen=True)
class Change:
    """What one operation writes, and whom it wakes once written."""

    machines: Sequence[Machine] = ()  # written whole (inserted or replaced)
    events: Sequence[Event] = ()
    removed: Mapping[str, float] = field(default_factory=dict)  # machine id -> when
    # cluster -> name -> output: one a cluster keeps already is never replaced
    outputs: Mapping[str, Mapping[str, ClusterOutput]] = field(default_factory=dict)
    clusters: Sequence[StoredCluster] = ()  # written as they are (spec, generation, deleting)
    retarget: Retarget | None = None  # None: the move target stays what it is
    # clusters removed whole, once their machines are (removed before or in this change),
    # with their join tokens and outputs; their events stay
    dropped: Sequence[str] = ()
    token_use: TokenUse | None = None  # a join token's use, counted with the rest or refused
    wake: Sequence[str] = ()  # the machines whose agents' long-polls are answered
    kick: bool = False  # a reconcile pass is asked for

    @property
    def writes(self) -> bool:
        """Whether the store has anything to write."""
        return bool(self.machines or self.events or self.removed or self.outputs
                    or self.clusters or self.retarget is not None or self.dropped
                    or self.token_use is not None)


def combined(changes: Iterable[Change]) -> Change:
    """One change doing what each does, in order (the last move target wins; a machine two
    changes write is written once, as the later one left it: a batch of reports from one
    agent costs one row)."""
    machines: dict[str, Machine] = {}
    events: list[Event] = []
    removed: dict[str, float] = {}
    outputs: dict[str, Mapping[str, ClusterOutput]] = {}
    clusters: list[StoredCluster] = []
    dropped: list[str] = []
    wake: list[str] = []
    retarget, token_use, kick = None, None, False
    for change in changes:
        machines.update((m.id, m) for m in change.machines)
        events += change.events
        removed.update(change.removed)
        outputs.update(change.outputs)
        clusters += change.clusters
        dropped += change.dropped
        wake += change.wake
        retarget = change.retarget if change.retarget is not None else retarget
        token_use = change.token_use or token_use
        kick = kick or change.kick
    return Change(machines=list(machines.values()), events=events, removed=removed,
                  outputs=outputs, clusters=clusters, retarget=retarget, dropped=dropped,
                  token_use=token_use, wake=wake, kick=kick)


def bumped(machines: Iterable[Machine]) -> list[Machine]:
    """The machines with a new generation each: every assignment is made again, so a parked
    long-poll is answered with what changed around it (a spec, a move target)."""
    return [replace(m, generation=m.generation + 1) for m in machines]
