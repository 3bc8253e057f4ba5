"""Which etcd snapshot uploads the coordinator takes (domain/etcdsnapshots.py): from whom, for
which item, when, of what size and checksum; whose step each precedes; which it lets go; and
the spec's refusal of a snapshot item where no etcd runs."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace

import pytest
from pydantic import ValidationError

from coordinator.domain import etcdsnapshots as rules
from coordinator.domain.errors import Conflict, Forbidden, NotFound
from coordinator.domain.model import Machine, MachineState, MintJob
from coordinator.domain.records import EtcdSnapshot
from coordinator.domain.specs.specs import spec_problems
from tests.support.builders import cluster, machine

SNAPSHOT_ITEM = {"name": "etcd-snapshot", "phase": "upgrade", "etcdSnapshotFrom": "/var/s.db",
                 "action": {"type": "exec", "argv": ["true"]}}
LEAVE_ITEM = {**SNAPSHOT_ITEM, "name": "before-removal", "phase": "leave"}
PLAIN = {"name": "upgrade-node", "phase": "upgrade", "action": {"type": "exec", "argv": ["true"]}}
SPEC = cluster(manager=[SNAPSHOT_ITEM, LEAVE_ITEM, PLAIN], worker=[PLAIN],
               etcdSnapshots={"maxSizeMiB": 2})
DATA = b"an etcd snapshot"  # 16 bytes
DIGEST = "sha-256=:" + base64.b64encode(hashlib.sha256(DATA).digest()).decode() + ":"
UPGRADING = machine("m1", "manager", state=MachineState.UPGRADE)


def admitted(who: Machine = UPGRADING, item: str = "etcd-snapshot", length: int | None = 16,
             digest: str | None = DIGEST) -> rules.Upload:
    return rules.admit(who, SPEC, item, length, digest, "s-1", 5.0)


def test_a_manager_upgrading_may_upload_before_its_own_upgrade() -> None:
    upload = admitted()
    assert (upload.snapshot.subject, upload.snapshot.phase, upload.snapshot.release,
            upload.length, upload.sha256) == ("m1", "upgrade", "1.0.0", len(DATA),
                                              hashlib.sha256(DATA).hexdigest())


def test_a_leave_snapshot_precedes_the_removal_of_the_manager_its_job_is_for() -> None:
    job = MintJob(kind="leave", joiner="id-m2", hostname="m2", ip="10.0.0.2", role="manager",
                  serial=0, items=("before-removal",))
    ready = machine("m1", "manager", state=MachineState.READY)
    assert admitted(replace(ready, minting=job), "before-removal").snapshot.subject == "m2"
    with pytest.raises(Conflict, match="m1 does not run leave items now"):
        admitted(ready, "before-removal")


@pytest.mark.parametrize(("who", "item", "refusal", "text"), [
    (machine("w1", "worker", state=MachineState.UPGRADE), "etcd-snapshot", Forbidden,
     "w1 is not a manager"),
    (UPGRADING, "upgrade-node", NotFound, "no manager item 'upgrade-node' with etcdSnapshotFrom"),
    (machine("m1", "manager", state=MachineState.READY), "etcd-snapshot", Conflict,
     "m1 does not run upgrade items now \\(it is Ready\\)"),
])
def test_who_and_when_are_refused_before_a_byte_is_read(who: Machine, item: str,
                                                        refusal: type[Exception],
                                                        text: str) -> None:
    with pytest.raises(refusal, match=text):
        admitted(who, item)


@pytest.mark.parametrize(("length", "digest", "status", "text"), [
    (None, DIGEST, 411, "Content-Length"),
    (0, DIGEST, 400, "empty"),
    (2 * 2**20 + 1, DIGEST, 413, r"2.0 MiB is larger than settings.etcdSnapshots.maxSizeMiB "
                                 r"\(2 MiB\) of cluster edge: raise it, or compact"),
    (4, None, 400, "Content-Digest header"),
    (4, "sha-256=:not base64!:", 400, "Content-Digest header"),
    (4, "sha-256=:" + base64.b64encode(b"short").decode() + ":", 400, "32 bytes"),
])
def test_what_is_announced_is_refused_with_its_status(length: int | None, digest: str | None,
                                                      status: int, text: str) -> None:
    with pytest.raises(rules.UploadRefused, match=text) as refused:
        admitted(length=length, digest=digest)
    assert refused.value.status == status


def test_another_digest_beside_sha256_is_read_past() -> None:
    assert admitted(digest="sha-512=:AAAA:, " + DIGEST).sha256 == hashlib.sha256(DATA).hexdigest()


def test_what_came_must_be_what_was_announced() -> None:
    upload = admitted()
    rules.received(upload, len(DATA), hashlib.sha256(DATA).hexdigest())
    with pytest.raises(rules.UploadRefused, match="damaged on the way, and is not kept"):
        rules.received(upload, len(DATA), hashlib.sha256(b"other").hexdigest())
    with pytest.raises(rules.UploadRefused, match="3 bytes of the etcd snapshot came, not the 16"):
        rules.received(upload, 3, hashlib.sha256(DATA).hexdigest())


def snapshot(index: int, phase: str = "upgrade") -> EtcdSnapshot:
    return EtcdSnapshot(f"s-{index}", "edge", "id-m1", "m1", "etcd-snapshot", phase, "m2",
                        "2.0", float(index), 2**20 * 3, "ab" * 32, True)


def test_the_newest_are_kept_and_the_event_says_what_went() -> None:
    newest_first = [snapshot(i) for i in (4, 3, 2, 1)]
    assert rules.expired(newest_first, 2) == newest_first[2:]
    assert rules.expired(newest_first, 5) == []
    kept = rules.kept_event(newest_first[0], UPGRADING, newest_first[2:], 9.0)
    assert kept.message == ("etcd snapshot s-4 kept before m2's upgrade to release 2.0: "
                            "3.0 MiB, sha256 abababababababab…, taken by etcd-snapshot on m1; "
                            "2 older deleted (settings.etcdSnapshots.keep)")
    assert kept.data["deleted"] == ["s-2", "s-1"] and kept.machine == "id-m1"
    removal = rules.kept_event(snapshot(5, "leave"), UPGRADING, [], 9.0)
    assert "kept before m2's removal: 3.0 MiB" in removal.message
    assert "older deleted" not in removal.message


def test_a_snapshot_item_where_no_etcd_is_upgraded_or_left_is_refused() -> None:
    assert spec_problems(cluster(worker=[SNAPSHOT_ITEM])) == [
        (("machineTypes", "worker", 0, "etcdSnapshotFrom"),
         "only manager items upload an etcd snapshot (workers run no etcd)")]
    with pytest.raises(ValidationError, match=r"etcdSnapshotFrom: only upgrade and leave items "
                                              r"upload an etcd snapshot .* not deploy items"):
        cluster(manager=[{**SNAPSHOT_ITEM, "phase": "deploy"}])
