"""The etcd snapshots the coordinator keeps: which upload it takes, what it says of one, and
which it lets go.

A manager's item with etcdSnapshotFrom (an upgrade item, or a leave item a remaining manager
runs before another's removal) leaves a snapshot that its agent uploads before the item may
succeed. The coordinator takes it only from a manager of the cluster, for an item of its spec
that declares one, while the manager runs that item's phase (its upgrade, or the leave job of
a removal), within settings.etcdSnapshots.maxSizeMiB and with its SHA-256 given first (RFC
9530's Content-Digest) so that a snapshot damaged on the way is refused, not kept. It keeps
the newest settings.etcdSnapshots.keep of each cluster; a backup carries the newest.

Pure: the service (service/etcdsnapshots.py) streams the bytes and stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.domain.errors import Conflict, Forbidden, NotFound
from coordinator.domain.events import event
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.records import EtcdSnapshot, Event
from nodeagent.wire.digest import sha256_in
from nodeagent.wire.protocol import SNAPSHOT_PHASES, StateItem

CHUNK_BYTES = 1 << 20  # what one sealed row holds: a MiB, 1.4 MB of text once sealed
# An upload begun this long ago and never completed (cut off, or its coordinator died) is
# deleted: nothing lists it, and a real one of 8 GiB takes minutes.
INCOMPLETE_SECONDS = 3600.0


class UploadRefused(Exception):
    """An upload refused before a byte of it was kept, with the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class Upload:
    """An upload admitted: the record it starts, and the SHA-256 its bytes must have."""

    snapshot: EtcdSnapshot
    length: int  # bytes, as announced
    sha256: str  # hex, as announced


def snapshot_item(spec: ClusterSpec, name: str) -> StateItem | None:
    """The cluster's manager item of that name that uploads a snapshot."""
    return next((i for i in spec.machine_types.manager if i.name == name
                 and i.etcd_snapshot_from is not None), None)


def admit(machine: Machine, spec: ClusterSpec, item_name: str, length: int | None,
          digest: str | None, snapshot_id: str, now: float) -> Upload:
    """The upload a machine's agent announces (its headers), or why it is refused:
    Forbidden, NotFound or Conflict for who and when, UploadRefused for what it sends."""
    if machine.role != "manager":
        raise Forbidden(f"{machine.hostname} is not a manager: only managers upload etcd "
                        "snapshots")
    item = snapshot_item(spec, item_name)
    if item is None:
        raise NotFound(f"cluster {spec.name} has no manager item {item_name!r} with "
                       f"etcdSnapshotFrom in a phase of {', '.join(SNAPSHOT_PHASES)}")
    subject = _subject(machine, item)
    if subject is None:
        raise Conflict(f"{machine.hostname} does not run {item.phase} items now "
                       f"(it is {machine.state.value}): its {item_name} snapshot is not taken")
    limit = spec.settings.etcd_snapshots.max_size_mib
    if length is None:
        raise UploadRefused(411, "an etcd snapshot is sent with its Content-Length")
    if length <= 0:
        raise UploadRefused(400, "the etcd snapshot is empty: etcdctl snapshot save wrote "
                            "nothing")
    if length > limit * 2**20:
        raise UploadRefused(413, f"the etcd snapshot of {mib(length)} is larger than "
                            f"settings.etcdSnapshots.maxSizeMiB ({limit} MiB) of cluster "
                            f"{spec.name}: raise it, or compact and defragment etcd")
    sha256 = sha256_of(digest)
    record = EtcdSnapshot(id=snapshot_id, cluster=spec.name, machine=machine.id,
                          hostname=machine.hostname, item=item.name, phase=item.phase,
                          subject=subject, release=spec.release, taken_at=now)
    return Upload(record, length, sha256)


def _subject(machine: Machine, item: StateItem) -> str | None:
    """The manager whose step the snapshot precedes: the machine's own upgrade, or the
    leaving manager of the leave job it runs; None when it runs neither now."""
    if item.phase == "upgrade":
        return machine.hostname if machine.state == MachineState.UPGRADE else None
    job = machine.minting
    return job.hostname if job is not None and job.kind == "leave" else None


def sha256_of(digest: str | None) -> str:
    """The hex SHA-256 a Content-Digest header names (`sha-256=:BASE64:`)."""
    raw = sha256_in(digest)
    if raw is None:
        raise UploadRefused(400, "an etcd snapshot is sent with its SHA-256 in a "
                            "Content-Digest header (sha-256=:BASE64:)")
    if len(raw) != 32:
        raise UploadRefused(400, "the Content-Digest's sha-256 is not the base64 of 32 bytes")
    return raw.hex()


def received(upload: Upload, size: int, sha256: str) -> None:
    """UploadRefused unless the bytes that came are the ones announced."""
    if size != upload.length:
        raise UploadRefused(400, f"{size} bytes of the etcd snapshot came, not the "
                            f"{upload.length} announced: it is not kept")
    if sha256 != upload.sha256:
        raise UploadRefused(400, f"the etcd snapshot's SHA-256 is {sha256}, not {upload.sha256} "
                            "as its Content-Digest says: it was damaged on the way, and is not "
                            "kept (the item fails and is run again)")


def expired(snapshots: Sequence[EtcdSnapshot], keep: int) -> list[EtcdSnapshot]:
    """A cluster's complete snapshots (newest first) beyond the newest `keep`."""
    return list(snapshots[keep:])


def kept_event(snapshot: EtcdSnapshot, machine: Machine, dropped: Sequence[EtcdSnapshot],
               now: float) -> Event:
    """What the history says of a snapshot kept: whose step it precedes, its size and sum,
    and the older ones it let go."""
    step = (f"{snapshot.subject}'s upgrade to release {snapshot.release}"
            if snapshot.phase == "upgrade" else f"{snapshot.subject}'s removal")
    gone = f"; {len(dropped)} older deleted (settings.etcdSnapshots.keep)" if dropped else ""
    return event(now, snapshot.cluster, "etcd-snapshot",
                 f"etcd snapshot {snapshot.id} kept before {step}: {mib(snapshot.size)}, "
                 f"sha256 {snapshot.sha256[:16]}…, taken by {snapshot.item} on "
                 f"{snapshot.hostname}{gone}", machine,
                 {"snapshot": snapshot.id, "item": snapshot.item, "subject": snapshot.subject,
                  "size": snapshot.size, "sha256": snapshot.sha256,
                  "deleted": [s.id for s in dropped]})


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
