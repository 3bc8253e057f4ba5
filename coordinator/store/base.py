"""The one store interface every backend implements. All coordinator state goes through it."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coordinator.domain.assignments.etags import Version
from coordinator.domain.changes import Change, Retarget
from coordinator.domain.machines.clones import Holder
from coordinator.domain.model import ClusterSpec, Machine, Role
from coordinator.domain.records import (
    AdminToken,
    ClusterOutput,
    CredentialOwner,
    EtcdSnapshot,
    Event,
    JoinToken,
    MachineCount,
    RemovedMachine,
    StoredCluster,
)
from coordinator.domain.views.machinelist import MachineQuery

# A snapshot of the store's state: each table's name (sql.TABLES) with its rows, oldest first,
# each row column name -> value as JSON carries it. Machines' documents keep their secrets
# sealed: a snapshot never holds them in the clear.
Tables = Mapping[str, Sequence[Mapping[str, Any]]]


class StoreError(Exception):
    pass


class Fenced(StoreError):
    """A write of a leader that has been deposed: another replica was elected since."""


class TokenRefused(StoreError):
    """A change's join token use did not count: the token is unknown, revoked, expired or used
    up. Nothing of the change was written."""


# The leader epoch the running task writes under: the reconcile loop sets it for its term, and
# the tasks it starts (drains) inherit it. A store shared by replicas refuses such a task's
# writes once another replica was elected (Fenced). None: not leader work, never fenced.
leader_epoch: ContextVar[int | None] = ContextVar("leader_epoch", default=None)


@dataclass(frozen=True)
class Term:
    """This replica's leadership, from its election until `lost` is set."""

    epoch: int | None  # None: a store no other coordinator shares, led for good
    lost: asyncio.Event = field(default_factory=asyncio.Event)


class Store(ABC):
    """Durable state. Every method is atomic; apply() writes one operation's whole change
    atomically.

    The last section (replicas) has defaults for a store only one coordinator uses; a backend
    several coordinators share overrides it."""

    kind: ClassVar[str]  # the backend's name, as a backup's manifest records its source

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date (migrations are versioned)."""

    @abstractmethod
    async def close(self) -> None: ...

    # -- clusters -------------------------------------------------------------
    @abstractmethod
    async def put_cluster(self, spec: ClusterSpec, now: float) -> StoredCluster:
        """Create or replace; the generation grows only when the spec changed."""

    @abstractmethod
    async def get_cluster(self, name: str) -> StoredCluster | None: ...

    @abstractmethod
    async def list_clusters(self) -> list[StoredCluster]: ...

    # -- join tokens (stored as hashes only) ----------------------------------
    @abstractmethod
    async def add_join_token(self, cluster: str, token_hash: str, now: float,
                             expires_at: float | None, max_uses: int | None) -> JoinToken: ...

    @abstractmethod
    async def list_join_tokens(self, cluster: str | None = None) -> list[JoinToken]:
        """Oldest first."""

    @abstractmethod
    async def join_token(self, token_hash: str) -> JoinToken | None:
        """The token with this hash, whatever its state; None when unknown."""

    @abstractmethod
    async def revoke_join_token(self, token_id: str) -> JoinToken | None:
        """None when no token has that id."""

    # -- admin API tokens (stored as hashes only) -------------------------------
    @abstractmethod
    async def add_admin_token(self, token_hash: str, name: str, role: str,
                              now: float) -> AdminToken: ...

    @abstractmethod
    async def admin_token(self, token_hash: str) -> AdminToken | None: ...

    @abstractmethod
    async def list_admin_tokens(self) -> list[AdminToken]: ...

    @abstractmethod
    async def revoke_admin_token(self, token_id: str) -> AdminToken | None: ...

    # -- machines ---------------------------------------------------------------
    @abstractmethod
    async def get_machine(self, machine_id: str) -> Machine | None: ...

    @abstractmethod
    async def machine_version(self, machine_id: str) -> Version | None:
        """The machine's generation with the store's epoch (None: no such machine), in one
        lookup and without decoding the machine: every long-poll starts by comparing it."""

    @abstractmethod
    async def credential_owner(self, credential_hash: str) -> CredentialOwner | None:
        """None for an unknown hash, and always for "" (a revoked credential)."""

    @abstractmethod
    async def list_machines(self, cluster: str | None = None, role: Role | None = None) -> list[Machine]:
        """Ordered by cluster, then hostname. With role, only machines of that role: every
        assignment and report needs a cluster's managers, never its thousands of workers, so
        the role filter must be served by an index."""

    @abstractmethod
    async def machine_page(self, query: MachineQuery) -> tuple[list[str], int]:
        """The ids of the page of machines query selects, in its order, and how many it
        selects: chosen by the database on columns (GET /v1/machines pages 10,000 machines),
        by the rules domain.views.machinelist.select spells in Python."""

    @abstractmethod
    async def count_machines(self) -> list[MachineCount]:
        """The fleet counted by cluster, state and responding, by the database without
        decoding a machine: /metrics is scraped every few seconds, and decoding 10,000
        machines for each scrape would stall the coordinator (docs/benchmarks.md)."""

    @abstractmethod
    async def get_machines(self, machine_ids: Collection[str]) -> list[Machine]:
        """Those of the machines that exist, in any order: the reconciler reloads just the
        machines that changed since its last pass."""

    @abstractmethod
    async def machines_by_hostname(self, hostname: str, cluster: str | None = None) -> list[Machine]:
        """The machines with this hostname, in the cluster or in any: registration and admin
        look-ups by name, through an index rather than a listing of the fleet."""

    @abstractmethod
    async def identity_holders(self, values: Collection[tuple[str, str]],
                               excluding: str) -> list[Holder]:
        """The machines but `excluding` holding one of these (kind, value) product_uuids or
        MACs (domain/machines/clones.py), through an index on the value: one registration costs a
        few look-ups, not a read of the fleet."""

    @abstractmethod
    async def machines_last_seen_between(self, cluster: str, start: float, end: float) -> list[str]:
        """Ids of the cluster's machines whose last_seen is in [start, end): with end = now
        minus the heartbeat timeout and start the previous pass's end, those that went silent
        since, found through an index on (cluster, last_seen)."""

    async def touch_machine(self, machine_id: str, now: float) -> None:
        """Record one heartbeat; see touch_machines."""
        await self.touch_machines({machine_id: now})

    @abstractmethod
    async def touch_machines(self, seen: Mapping[str, float]) -> None:
        """Record heartbeats (machine id -> time) in one transaction, without rewriting the
        machines: last_seen becomes the later of the stored and the given time. Unknown ids
        are ignored (a heartbeat may race the machine's removal). The coordinator batches
        heartbeats in memory and calls this about once a second."""

    @abstractmethod
    async def removed_machine(self, machine_id: str) -> RemovedMachine | None:
        """What is kept of the machine with this id once its record was removed (None: never
        removed, or no such machine)."""

    @abstractmethod
    async def removed_by_hostname(self, hostname: str,
                                  cluster: str | None = None) -> list[RemovedMachine]:
        """What is kept of the machines of this hostname (in cluster, when named) whose
        records were removed, the most recently removed first (at most 100)."""

    @abstractmethod
    async def removed_credential(self, credential_hash: str) -> RemovedMachine | None:
        """The machine last removed while this was its credential's hash; None for an unknown
        hash, and always for "" (a revoked credential proves nothing)."""

    # -- atomic writes ----------------------------------------------------------
    @abstractmethod
    async def apply(self, change: Change) -> list[Event]:
        """Write the whole change in one transaction, or nothing of it (an error raised part of
        the way leaves the store as it was): its clusters as decided, the move target, cluster
        outputs (cluster -> name -> output: one a cluster keeps already is never replaced),
        machines upserted and removed (id -> when), clusters dropped with their join tokens and
        outputs once their machines are gone (else StoreError, nothing written), events
        appended, a join token's use counted (token_use: in the same conditional update, so
        concurrent registrations never exceed its limit; TokenRefused, nothing written, when
        the token is not usable then). Returns the events with
        their ids. A removed machine leaves what removed_machine and removed_credential
        return, for good: its agent may come back months later."""

    async def commit(
        self,
        machines: Sequence[Machine] = (),
        events: Sequence[Event] = (),
        removed: Mapping[str, float] | None = None,
        outputs: Mapping[str, Mapping[str, ClusterOutput]] | None = None,
    ) -> list[Event]:
        """apply() of a change of machines, events, removals and outputs only."""
        return await self.apply(Change(machines=machines, events=events, removed=removed or {},
                                       outputs=outputs or {}))

    # -- events -----------------------------------------------------------------
    @abstractmethod
    async def list_events(
        self,
        cluster: str | None = None,
        machine: str | None = None,
        since_id: int = 0,
        since_time: float | None = None,
        limit: int = 1000,
        *,
        kinds: Sequence[str] | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Events matching every filter given, at most `limit` of them.

        cluster, machine (an id), kinds (any of these kinds): equality filters;
        since_id: only ids above it (page on with the last id seen); since_time: time >= it.
        In id order, oldest first; with newest_first, the *last* `limit` matches, newest first
        (the dashboard's "recent output", the newest id for a stream to start after).

        A backend implements every filter in its query (see sql.Statements.events), never by
        filtering after the limit. tests/integration/store/test_store.py checks both.
        """

    @abstractmethod
    async def prune_events(self, before: float, keep: int, chunk: int) -> int:
        """Delete the events older than `before` and those beyond the newest `keep`, oldest
        first and at most `chunk` of them in one transaction; returns how many went (call
        again until 0). See sql.prune_through."""

    # -- snapshots (backup, restore, pivot) --------------------------------------------
    @abstractmethod
    async def export(self) -> dict[str, list[dict[str, Any]]]:
        """Every table of the state (sql.TABLES) as one consistent snapshot: read in one
        transaction, so that a backup taken while agents report holds no half of a commit.
        Writers go on meanwhile."""

    @abstractmethod
    async def occupied(self) -> list[str]:
        """The tables that hold a row: an import (import_) into this store would be refused
        for them, so a pivot's target is checked by it before anything is frozen."""

    @abstractmethod
    async def import_(self, tables: Tables, beside: Collection[str] = ()) -> None:
        """Write a snapshot (what export returned, from either backend) into this store in one
        transaction; StoreError, with nothing written, when the store already holds any state
        (but in the tables named in beside, which the snapshot must not carry: a pivot's
        target keeps its own admin tokens). Event ids are kept, and later events are numbered
        after them. The store's epoch is minted anew in the same transaction: the snapshot's
        generations may be behind what its agents hold (domain/assignments/etags.py)."""

    # -- etcd snapshots (service/etcdsnapshots.py) --------------------------------
    @abstractmethod
    async def begin_etcd_snapshot(self, snapshot: EtcdSnapshot) -> None:
        """Record a snapshot whose chunks are about to arrive (incomplete: listed nowhere)."""

    @abstractmethod
    async def add_etcd_snapshot_chunk(self, snapshot_id: str, seq: int, data: bytes) -> None:
        """Chunk seq (0, 1, ...) of an incomplete snapshot, sealed under the secrets key."""

    @abstractmethod
    async def complete_etcd_snapshot(self, snapshot_id: str, size: int, sha256: str) -> None:
        """Every chunk arrived and checked: the snapshot is listed and handed out from now."""

    @abstractmethod
    async def etcd_snapshots(self, cluster: str) -> list[EtcdSnapshot]:
        """A cluster's complete snapshots, newest first."""

    @abstractmethod
    async def etcd_snapshot(self, snapshot_id: str) -> EtcdSnapshot | None:
        """One snapshot, complete or not."""

    @abstractmethod
    async def etcd_snapshot_chunk(self, snapshot_id: str, seq: int) -> bytes | None:
        """Chunk seq of a snapshot, unsealed; None past its last."""

    @abstractmethod
    async def incomplete_etcd_snapshots(self, before: float) -> list[str]:
        """The ids of snapshots begun before `before` and never completed (an upload cut off,
        a coordinator that died mid-upload)."""

    @abstractmethod
    async def drop_etcd_snapshot(self, snapshot_id: str) -> None:
        """A snapshot and its chunks, gone in one transaction."""

    # -- the move target ----------------------------------------------------------
    @abstractmethod
    async def move_target(self) -> str | None:
        """The coordinator every agent is told to move to, as the JSON document set_move_target
        wrote; None when there is none."""

    async def set_move_target(self, doc: str | None) -> None:
        """Replace the move target (None: clear it): apply() of that change alone."""
        await self.apply(Change(retarget=Retarget(doc)))

    # -- replicas -------------------------------------------------------------------
    def mutex(self) -> AbstractAsyncContextManager[Any]:
        """A lock for read-modify-write sequences of machines, held by one task of one
        coordinator at a time: every replica sharing the store, when it is shared."""
        return asyncio.Lock()

    async def campaign(self) -> Term:
        """Wait until this coordinator leads (runs the reconcile loop) and return its term."""
        return Term(None)

    async def listen(self, deliver: Callable[[str], None]) -> bool:
        """Deliver to `deliver` what other coordinators publish ("" when some may have been
        missed). False when no other coordinator can share this store: nothing to publish."""
        return False

    async def publish(self, message: str) -> None:
        """Send message (at most MAX_MESSAGE bytes) to every other coordinator that listens;
        only called when listen() returned True."""
        raise StoreError(f"{type(self).__name__} is never shared: there is nobody to tell")


MAX_MESSAGE = 7900  # bytes: PostgreSQL's NOTIFY payloads stop just under 8000
