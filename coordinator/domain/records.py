"""What the coordinator keeps besides machines: stored clusters, events, tokens, and the
small read models the hot paths use instead of decoding whole machines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.domain.durations import utc
from coordinator.domain.model import ClusterSpec


@dataclass(frozen=True)
class ClusterOutput:
    """A cluster output's value as the cluster keeps it (domain/specs/outputs.py): the first value a
    manager produced, kept when that manager is deleted; never shown, logged or in events
    (sealed at rest)."""

    value: str = field(repr=False)
    machine: str  # id of the manager whose item produced it
    hostname: str
    produced_at: float


@dataclass(frozen=True)
class StoredCluster:
    spec: ClusterSpec
    generation: int  # grows on every apply that changed the spec
    created_at: float
    updated_at: float
    deleting: bool = False
    # Its outputs, "ITEM.NAME": value and where it came from (outputs.adopted).
    outputs: dict[str, ClusterOutput] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class EtcdSnapshot:
    """An etcd snapshot a manager's item uploaded before a control-plane step (its
    etcdSnapshotFrom), as the coordinator keeps it: this record, and its bytes sealed in chunks
    (the store's etcd_snapshot_chunks). Incomplete while its chunks are still arriving."""

    id: str
    cluster: str
    machine: str  # id of the manager whose item took it
    hostname: str
    item: str
    phase: str
    subject: str  # hostname of the manager whose step it precedes: the uploader's upgrade, or
    # the leaving manager whose removal its leave job carries
    release: str  # the release the uploader was given
    taken_at: float
    size: int = 0
    sha256: str = ""
    complete: bool = False


@dataclass(frozen=True)
class Event:
    """One line of history: what happened to which machine, and when."""

    time: float
    cluster: str
    kind: str  # e.g. registered, approved, state, item, heartbeat-lost, cluster-applied
    message: str
    machine: str | None = None
    hostname: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    id: int = 0  # assigned by the store, strictly increasing


@dataclass(frozen=True)
class JoinToken:
    """A join token as stored: its hash only. `id` (a prefix of the hash) names it in lists
    and revocations without revealing anything that could be used to join."""

    id: str
    cluster: str  # model.POOL: a token into the pool
    created_at: float
    expires_at: float | None  # None: never expires
    max_uses: int | None  # None: unlimited
    uses: int = 0
    revoked: bool = False
    auto_approve: bool = False  # a pool token: its machines approved once their prechecks pass


@dataclass(frozen=True)
class AdminToken:
    id: str
    name: str
    role: str  # see coordinator.tokens.ADMIN_ROLES
    created_at: float
    revoked: bool = False


@dataclass(frozen=True)
class CredentialOwner:
    """The machine a credential belongs to, as far as authenticating a request needs: read
    without decoding the machine's documents, since every agent request does it."""

    machine_id: str
    cluster: str
    hostname: str
    expires_at: float | None
    responding: bool


@dataclass(frozen=True)
class RemovedMachine:
    """What the store keeps of a machine whose record was removed: its agent, which may still
    hold its credential or name its id, is told that the machine was deleted, where and when,
    rather than refused as if it had never existed."""

    machine_id: str
    cluster: str
    hostname: str
    removed_at: float

    def notice(self) -> str:
        """Why its agent's requests are refused, and what it must do."""
        when = utc(self.removed_at)
        return (f"machine {self.hostname} ({self.machine_id}) was deleted from cluster "
                f"{self.cluster} at {when}: its credential and its record are gone; register "
                "again to rejoin, as a new machine")


@dataclass(frozen=True)
class MachineCount:
    """How many machines of a cluster are in a state, responding or not."""

    cluster: str
    state: str
    responding: bool
    count: int
