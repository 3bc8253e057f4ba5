"""The etcd snapshots managers' items upload (domain/etcdsnapshots.py has the rules): received
a chunk at a time, each sealed and stored as it comes, checked against the SHA-256 announced
before it is listed, the oldest beyond the cluster's `keep` deleted; handed back, unsealed, a
chunk at a time. Memory stays a chunk per upload whatever the snapshot's size, and at most
MAX_UPLOADS arrive at once (more are answered 429: the item is retried). An upload cut off is
refused as short, its chunks deleted."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from coordinator.domain import etcdsnapshots as rules
from coordinator.domain.errors import NotFound, TooManyRequests
from coordinator.domain.records import EtcdSnapshot
from coordinator.service.queries import Queries
from coordinator.service.writes import Writes
from coordinator.store.base import Store

MAX_UPLOADS = 2  # each holds a database writer busy with a MiB at a time
BUSY_RETRY_SECONDS = 30.0
Read = Callable[[int], Awaitable[bytes]]  # up to n bytes of the body; b"" at its end


class EtcdSnapshots:
    def __init__(self, store: Store, writes: Writes, queries: Queries,
                 clock: Callable[[], float]) -> None:
        self.store = store
        self.writes = writes
        self.queries = queries
        self.clock = clock
        self._uploads = asyncio.Semaphore(MAX_UPLOADS)
        self._receiving: set[str] = set()  # never swept while their chunks arrive

    async def receive(self, machine_id: str, item: str, length: int | None, digest: str | None,
                      read: Read) -> EtcdSnapshot:
        """Keep the snapshot a machine's item uploads (read: its body), or refuse it (see
        rules.admit) with nothing kept."""
        if self._uploads.locked():
            raise TooManyRequests(f"{MAX_UPLOADS} etcd snapshots are being received: the item "
                                  "retries", BUSY_RETRY_SECONDS)
        async with self._uploads:
            machine = await self.queries.machine(machine_id)
            cluster = await self.queries.cluster(machine.cluster)
            upload = rules.admit(machine, cluster.spec, item, length, digest,
                                 secrets.token_hex(8), self.clock())
            snapshot = upload.snapshot
            self._receiving.add(snapshot.id)
            try:  # cancelled too (the agent hung up): nothing of it is kept
                await self.store.begin_etcd_snapshot(snapshot)
                size, sha256 = await self._chunks(snapshot.id, read)
                rules.received(upload, size, sha256)
                await self.store.complete_etcd_snapshot(snapshot.id, size, sha256)
            except BaseException:
                await asyncio.shield(self.store.drop_etcd_snapshot(snapshot.id))
                raise
            finally:
                self._receiving.discard(snapshot.id)
            kept = replace(snapshot, size=size, sha256=sha256, complete=True)
            dropped = await self._let_go(cluster.spec.name,
                                         cluster.spec.settings.etcd_snapshots.keep)
            await self.writes.record([rules.kept_event(kept, machine, dropped, self.clock())])
            return kept

    async def _chunks(self, snapshot_id: str, read: Read) -> tuple[int, str]:
        """Store the body a chunk at a time; its size and SHA-256."""
        digest, size, seq = hashlib.sha256(), 0, 0
        while True:
            chunk = bytearray()
            while len(chunk) < rules.CHUNK_BYTES:
                piece = await read(rules.CHUNK_BYTES - len(chunk))
                if not piece:
                    break
                chunk += piece
            if not chunk:
                return size, digest.hexdigest()
            digest.update(chunk)
            size += len(chunk)
            await self.store.add_etcd_snapshot_chunk(snapshot_id, seq, bytes(chunk))
            seq += 1

    async def _let_go(self, cluster: str, keep: int) -> list[EtcdSnapshot]:
        """Delete the cluster's snapshots beyond `keep`, and every upload left incomplete
        long ago (rules.INCOMPLETE_SECONDS); the snapshots deleted."""
        dropped = rules.expired(await self.store.etcd_snapshots(cluster), keep)
        stale = await self.store.incomplete_etcd_snapshots(
            self.clock() - rules.INCOMPLETE_SECONDS)
        stale = [i for i in stale if i not in self._receiving]
        for snapshot_id in [s.id for s in dropped] + stale:
            await self.store.drop_etcd_snapshot(snapshot_id)
        return dropped

    async def listed(self, cluster: str) -> list[EtcdSnapshot]:
        """A cluster's snapshots, newest first."""
        await self.queries.cluster(cluster)
        return await self.store.etcd_snapshots(cluster)

    async def opened(self, cluster: str, snapshot_id: str
                     ) -> tuple[EtcdSnapshot, AsyncIterator[bytes]]:
        """A complete snapshot of the cluster and its bytes, unsealed a chunk at a time. The
        first is read here, so that a key that cannot open it fails before an answer starts;
        the client checks the whole against the SHA-256 listed."""
        found = await self.store.etcd_snapshot(snapshot_id)
        if found is None or found.cluster != cluster or not found.complete:
            raise NotFound(f"cluster {cluster} has no etcd snapshot {snapshot_id} "
                           f"(`coordinator cluster etcd-snapshots {cluster}` lists them)")
        return found, self._bytes(found.id, await self.store.etcd_snapshot_chunk(found.id, 0))

    async def _bytes(self, snapshot_id: str, first: bytes | None) -> AsyncIterator[bytes]:
        chunk, seq = first, 0
        while chunk is not None:
            yield chunk
            seq += 1
            chunk = await self.store.etcd_snapshot_chunk(snapshot_id, seq)
