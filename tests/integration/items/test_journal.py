"""The journal on disk: what it records, that it refuses to guess from a damaged file, and
that no kill -9 at any moment of a write leaves it unreadable or inconsistent."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.journal import Journal, JournalError
from tests.integration.items.journal_writer import applied_prefix, numbered
from tests.support.items import leftovers

pytestmark = pytest.mark.integration


def test_a_missing_journal_is_empty(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.json", "m-1")
    assert not journal.applied(numbered(0).fingerprint())
    assert journal.in_progress() is None
    assert not (tmp_path / "journal.json").exists()


def test_started_then_applied_is_persisted_privately(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.json"
    journal = Journal(path, "m-1")
    item = numbered(0)
    journal.record_started(item)
    assert Journal(path, "m-1").in_progress() == item.fingerprint()
    assert not Journal(path, "m-1").applied(item.fingerprint())
    journal.record_applied(item)
    reloaded = Journal(path, "m-1")
    assert reloaded.applied(item.fingerprint())
    assert reloaded.in_progress() is None
    assert path.stat().st_mode & 0o777 == 0o600


def test_applying_another_item_keeps_the_one_in_progress(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.json", "m-1")
    journal.record_started(numbered(0))
    journal.record_applied(numbered(1))
    assert journal.in_progress() == numbered(0).fingerprint()


def test_the_journal_of_a_deleted_machine_is_set_aside_and_the_new_one_runs_everything(
        tmp_path: Path) -> None:
    """Deleted and registered again, the node is another machine: its items all run again."""
    path = tmp_path / "journal.json"
    Journal(path, "m-1").record_applied(numbered(0))
    again = Journal(path, "m-2")
    assert not again.applied(numbered(0).fingerprint())
    assert not path.exists()
    assert Journal(tmp_path / "journal.m-1.json", "m-1").applied(numbered(0).fingerprint())
    again.record_applied(numbered(1))
    assert Journal(path, "m-2").applied(numbered(1).fingerprint())
    assert json.loads(path.read_text())["machine_id"] == "m-2"


def test_a_journal_an_older_agent_wrote_belongs_to_the_machine_that_reads_it(
        tmp_path: Path) -> None:
    """An agent upgraded in place keeps what it applied."""
    path = tmp_path / "journal.json"
    Journal(path, "m-1").record_applied(numbered(0))
    older = json.loads(path.read_text())
    del older["machine_id"]
    path.write_text(json.dumps(older))
    assert Journal(path, "m-7").applied(numbered(0).fingerprint())


def test_the_newest_three_set_aside_journals_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    for n in range(6):
        Journal(path, f"m-{n}").record_applied(numbered(n))
        os.utime(path, (n, n))  # written in this order, whatever the file system's clock
    Journal(path, "m-6")
    assert sorted(p.name for p in tmp_path.glob("journal.*.json")) == [
        "journal.m-3.json", "journal.m-4.json", "journal.m-5.json"]


@pytest.mark.parametrize("content", [b"", b"{not json", b"[]", b'{"version": 99}',
                                     b'{"version": 1}', b"\xff\xfe"])
def test_a_damaged_journal_is_refused_not_guessed(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "journal.json"
    path.write_bytes(content)
    with pytest.raises(JournalError, match=f"cannot read the journal {path}"):
        Journal(path, "m-1")


def test_kill_9_at_any_moment_never_leaves_a_torn_or_inconsistent_journal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.json"
    rand = random.Random(9)
    starts = []
    killed_mid_write = 0
    for _ in range(12):
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.items.journal_writer", str(path)],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3])
        assert writer.stdout is not None
        # The writer loaded the previous round's journal before saying where it resumes.
        starts.append(int(writer.stdout.readline()))
        time.sleep(rand.uniform(0, 0.05))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        writer.stdout.close()

        journal = Journal(path, "m-1")
        applied = applied_prefix(journal)
        assert not any(journal.applied(numbered(n).fingerprint())
                       for n in range(applied, applied + 50)), "applied is not a prefix"
        assert journal.in_progress() in (None, numbered(applied).fingerprint())
        temps = len(leftovers(tmp_path))
        assert temps <= 1  # at most the one temp file of the write that was killed
        killed_mid_write += temps
    assert starts == sorted(starts)
    assert starts[-1] > starts[0], "the writer made no progress between kills"
    assert killed_mid_write > 0, "no kill landed between creating a temp file and the rename"
    Journal(path, "m-1").record_started(numbered(10**6))
    assert leftovers(tmp_path) == []  # the next write cleans up after a killed one
