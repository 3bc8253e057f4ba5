"""An item with etcdSnapshotFrom, run for real: it succeeds only once the file it left went to
the coordinator (the daemon's upload seam); a file it did not leave, or a snapshot the
coordinator did not keep, fails it, and the journal does not count it applied, so it runs
again (and takes a new snapshot) rather than report a snapshot nobody kept."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from nodeagent.items.outcome import ItemFailed
from nodeagent.journal import Journal
from nodeagent.wire.protocol import RetryPolicy, StateItem
from tests.support.items import Recorder, Uploads, apply, make_item, run

pytestmark = pytest.mark.integration


def snapshotting(script: str = "mkdir -p var/lib; printf 'etcd-bytes' > var/lib/snap.db; "
                 "echo run >> runs") -> StateItem:
    return make_item("etcd-snapshot", {"type": "exec", "argv": ["sh", "-c", script]},
                     phase="upgrade", etcdSnapshotFrom="/var/lib/snap.db")


async def test_the_file_the_item_left_is_uploaded_before_it_succeeds(root: Path) -> None:
    uploads = Uploads()
    outcome = await apply(snapshotting(), root, upload=uploads)
    assert outcome.succeeded, outcome.error
    assert uploads.sent == [("etcd-snapshot", b"etcd-bytes")]


async def test_a_snapshot_the_item_did_not_leave_fails_it_naming_the_file(root: Path) -> None:
    uploads = Uploads()
    outcome = await apply(snapshotting("true"), root, upload=uploads)
    assert not outcome.succeeded and uploads.sent == []
    assert outcome.error.startswith("etcdSnapshotFrom /var/lib/snap.db: cannot read it")


async def test_a_snapshot_the_coordinator_did_not_keep_fails_the_item_and_it_runs_again(
        root: Path, tmp_path: Path) -> None:
    refusals = ["the coordinator did not keep the etcd snapshot: HTTP 413: too large"]

    async def upload(item: str, snapshot: BinaryIO) -> None:
        if refusals:
            raise ItemFailed(refusals.pop())

    recorder = Recorder()
    journal = Journal(tmp_path / "journal.json", "m-1")
    assert await run([snapshotting()], journal, recorder, root,
                     retry=RetryPolicy(base_seconds=1, max_seconds=1), upload=upload)
    failed, = (r for r in recorder.reports if r.status == "failed")
    assert failed.error == "the coordinator did not keep the etcd snapshot: HTTP 413: too large"
    assert recorder.statuses()[-1] == ("etcd-snapshot", "succeeded", 2)
    assert (root / "runs").read_text().count("run") == 2  # a new snapshot for the second upload
