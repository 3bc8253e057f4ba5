"""run_phase with real commands and a real journal: order, reports, retries with backoff,
giving up, and never re-running what the journal says is applied (also after a restart)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from nodeagent.backoff import delay
from nodeagent.journal import Journal
from nodeagent.wire.protocol import ItemReport, RetryPolicy, StateItem
from tests.support.items import Recorder, exec_item, make_item, run

pytestmark = pytest.mark.integration

def counting(name: str, counter: Path, fail_times: int = 0, **fields: object) -> StateItem:
    """An exec item that appends a line to counter per run and fails its first fail_times runs."""
    script = (f'echo run >> {counter}; n=$(wc -l < {counter}); echo "run $n"; '
              f'[ "$n" -gt {fail_times} ] || {{ echo "not yet" >&2; exit 7; }}')
    return exec_item(name, ["sh", "-c", script], **fields)


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


async def test_items_run_in_order_and_each_is_reported_and_journaled(
    root: Path, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "state" / "journal.json", "m-1")
    recorder = Recorder()
    items = [counting("first", tmp_path / "a"),
             make_item("second", {"type": "file", "path": "/etc/x.conf",
                                  "template": "${cluster.name}"})]
    assert await run(items, journal, recorder, root)
    assert recorder.statuses() == [("first", "running", 1), ("first", "succeeded", 1),
                                   ("second", "running", 1), ("second", "succeeded", 1)]
    first_done = recorder.reports[1]
    assert first_done.exit_code == 0
    assert first_done.output == "run 1\n"
    assert first_done.phase == "prepare"
    assert first_done.fingerprint == items[0].fingerprint()
    assert first_done.finished_at is not None
    assert first_done.started_at <= first_done.finished_at <= time.time()
    assert (root / "etc/x.conf").read_text() == "edge-1"
    reloaded = Journal(tmp_path / "state" / "journal.json", "m-1")
    assert all(reloaded.applied(item.fingerprint()) for item in items)
    assert reloaded.in_progress() is None
    assert recorder.sleeps == []


async def test_the_journal_marks_an_item_in_progress_before_it_runs(
    root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "journal.json"
    item = counting("only", tmp_path / "count")
    seen_on_disk: list[str | None] = []

    class Checking(Recorder):
        async def report(self, report: ItemReport) -> None:
            if report.status == "running":
                assert runs(tmp_path / "count") == 0
                seen_on_disk.append(Journal(path, "m-1").in_progress())
            await super().report(report)

    await run([item], Journal(path, "m-1"), Checking(), root)
    assert seen_on_disk == [item.fingerprint()]


async def test_a_failing_item_is_retried_with_backoff_and_later_items_wait(
    root: Path, tmp_path: Path
) -> None:
    later_marker = root / "etc/later.conf"

    class Checking(Recorder):
        async def report(self, report: ItemReport) -> None:
            if report.item == "flaky":
                assert not later_marker.exists(), "a later item ran before an earlier succeeded"
            await super().report(report)

    recorder = Checking()
    items = [counting("flaky", tmp_path / "count", fail_times=3),
             make_item("later", {"type": "file", "path": "/etc/later.conf", "content": "x"})]
    assert await run(items, Journal(tmp_path / "journal.json", "m-1"), recorder, root,
                     rand=random.Random(42))
    expected_rand = random.Random(42)
    assert recorder.sleeps == [delay(n, 2, 5, expected_rand) for n in (1, 2, 3)]
    assert runs(tmp_path / "count") == 4
    assert recorder.statuses() == [
        ("flaky", "running", 1), ("flaky", "failed", 1), ("flaky", "running", 2),
        ("flaky", "failed", 2), ("flaky", "running", 3), ("flaky", "failed", 3),
        ("flaky", "running", 4), ("flaky", "succeeded", 4),
        ("later", "running", 1), ("later", "succeeded", 1),
    ]
    failures = [r for r in recorder.reports if r.status == "failed"]
    for report, wait in zip(failures, recorder.sleeps, strict=True):
        assert report.error == "sh exited with 7 (expected 0)"
        assert report.exit_code == 7
        assert report.output == f"run {report.attempt}\nnot yet\n"
        assert report.finished_at is not None
        assert report.next_retry_at == pytest.approx(report.finished_at + wait)


async def test_max_attempts_gives_up_without_running_later_items(
    root: Path, tmp_path: Path
) -> None:
    recorder = Recorder()
    items = [counting("broken", tmp_path / "count", fail_times=100),
             counting("never", tmp_path / "never")]
    retry = RetryPolicy(base_seconds=1, max_seconds=1, max_attempts=2)
    assert not await run(items, Journal(tmp_path / "journal.json", "m-1"), recorder, root, retry)
    assert recorder.statuses() == [("broken", "running", 1), ("broken", "failed", 1),
                                   ("broken", "running", 2), ("broken", "failed", 2)]
    assert recorder.reports[1].next_retry_at is not None and not recorder.reports[1].gave_up
    assert recorder.reports[-1].next_retry_at is None
    assert recorder.reports[-1].gave_up  # the last one says so: the coordinator shows it
    assert len(recorder.sleeps) == 1
    assert runs(tmp_path / "never") == 0


async def test_journaled_items_are_not_run_again_after_a_restart(
    root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "journal.json"
    items = [counting("one", tmp_path / "one"), counting("two", tmp_path / "two")]
    await run(items, Journal(path, "m-1"), Recorder(), root)
    again = Recorder()
    assert await run(items, Journal(path, "m-1"), again, root)  # a fresh agent process
    assert (runs(tmp_path / "one"), runs(tmp_path / "two")) == (1, 1)
    assert again.statuses() == [("one", "succeeded", 1), ("two", "succeeded", 1)]
    assert {r.output for r in again.reports} == {"already applied (journal)"}


async def test_a_new_version_of_an_item_runs_again(root: Path, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.json", "m-1")
    await run([counting("one", tmp_path / "one")], journal, Recorder(), root)
    await run([counting("one", tmp_path / "one", version="2")], journal, Recorder(), root)
    assert runs(tmp_path / "one") == 2


async def test_an_interrupted_item_runs_again(root: Path, tmp_path: Path) -> None:
    """Started but never recorded as applied (the agent died mid-item): it is not skipped."""
    path = tmp_path / "journal.json"
    item = counting("one", tmp_path / "one")
    Journal(path, "m-1").record_started(item)
    journal = Journal(path, "m-1")
    assert journal.in_progress() == item.fingerprint()
    await run([item], journal, Recorder(), root)
    assert runs(tmp_path / "one") == 1
    assert Journal(path, "m-1").in_progress() is None


KUBECONFIG = "apiVersion: v1\nusers: [{name: admin, user: {client-key-data: c2VjcmV0}}]\n"


async def test_a_kubeconfig_item_reports_its_file_in_its_own_field_also_from_the_journal(
        root: Path, tmp_path: Path) -> None:
    item = make_item("admin-conf", {"type": "file", "path": "/etc/kubernetes/admin.conf",
                                    "content": KUBECONFIG}, kubeconfigFrom="/etc/kubernetes/admin.conf",
                     phase="deploy")
    journal, recorder = Journal(tmp_path / "journal.json", "m-1"), Recorder()
    assert await run([item], journal, recorder, root)
    done = recorder.reports[-1]
    assert (done.status, done.kubeconfig) == ("succeeded", KUBECONFIG)
    assert "c2VjcmV0" not in done.output + done.error
    assert all(r.kubeconfig is None for r in recorder.reports[:-1]), "a running report carried it"

    again = Recorder()  # a restarted agent given the phase again reports it from the journal
    assert await run([item], Journal(tmp_path / "journal.json", "m-1"), again, root)
    assert [(r.output, r.kubeconfig) for r in again.reports] == [
        ("already applied (journal)", KUBECONFIG)]

    (root / "etc/kubernetes/admin.conf").unlink()  # gone: the item that makes it runs again
    third = Recorder()
    assert await run([item], Journal(tmp_path / "journal.json", "m-1"), third, root)
    assert [r.status for r in third.reports] == ["running", "succeeded"]
    assert third.reports[-1].kubeconfig == KUBECONFIG


async def test_an_item_that_leaves_no_kubeconfig_fails_naming_the_file(
        root: Path, tmp_path: Path) -> None:
    item = exec_item("init", ["true"], kubeconfigFrom="/etc/kubernetes/admin.conf")
    recorder = Recorder()
    assert not await run([item], Journal(tmp_path / "journal.json", "m-1"), recorder, root,
                         RetryPolicy(max_attempts=1))
    failed = recorder.reports[-1]
    assert failed.status == "failed" and failed.kubeconfig is None
    assert failed.error.startswith("kubeconfigFrom /etc/kubernetes/admin.conf: cannot read it")


async def test_a_version_check_fails_until_the_declared_version_is_installed(
        root: Path, tmp_path: Path) -> None:
    installed = root / "installed"
    installed.write_text("0.14.0\n")
    check = make_item("helm-controller.version", {
        "type": "version", "argv": ["sh", "-c", f"echo helm-controller; cat {installed}"],
        "expect": "0.15.0"}, phase="postdeploy")
    recorder = Recorder()
    assert not await run([check], Journal(tmp_path / "journal.json", "m-1"), recorder, root,
                         RetryPolicy(max_attempts=1))
    assert recorder.reports[-1].error == "installed version '0.14.0', declared '0.15.0'"
    installed.write_text("0.15.0\n")
    recorder = Recorder()
    assert await run([check], Journal(tmp_path / "journal.json", "m-1"), recorder, root)
    assert recorder.reports[-1].status == "succeeded"
