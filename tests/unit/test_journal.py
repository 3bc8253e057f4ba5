"""The agent's journal across a machine's incarnations (a claimed machine back in the pool,
reset, and claimed again runs every item anew) and for remedies (each run is a new one)."""

from __future__ import annotations

from pathlib import Path

from nodeagent.journal import Journal
from nodeagent.wire.protocol import Assignment
from tests.support.builders import item


def test_a_machine_claimed_again_after_its_reset_starts_an_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    first = Assignment(machine_id="m-1", generation=1, state="Deploy", phase="deploy")
    journal = Journal(path, first.journal_owner)
    journal.record_applied(item("join", "deploy"))
    assert Journal(path, first.journal_owner).applied(item("join", "deploy").fingerprint())

    again = first.model_copy(update={"incarnation": 1})
    assert again.journal_owner == "m-1.1"
    fresh = Journal(path, again.journal_owner)
    assert not fresh.applied(item("join", "deploy").fingerprint())
    assert (tmp_path / "journal.m-1.json").exists()  # the old incarnation's, set aside


def test_remedy_items_are_never_journaled_each_run_is_new(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.json", "m-1")
    remedy = item("kick-kubelet", "remedy")
    journal.record_started(remedy)
    journal.record_applied(remedy)
    assert journal.in_progress() is None
    assert journal.recorded(remedy) is None
