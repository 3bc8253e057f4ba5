"""Item outputs with real commands and a real journal: what the succeeded report carries, what
its output shows of secrets, the failure of an output not produced, the journal's replay, and
job items (mint, revoke) that run every time."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nodeagent.journal import Journal
from nodeagent.wire.protocol import Assignment, RetryPolicy, StateItem
from nodeagent.wire.redact import MASK
from tests.support.agent import NODEAGENT
from tests.support.items import PYTHON, VALUES, Recorder, exec_item, make_item, run

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(max_attempts=1)
KEY = "0f3a9c77b1e2"  # a kubeadm certificate key, say
CA_HASH = "sha256:" + "e3" * 32


def minting(phase: str = "prepare") -> StateItem:
    """Prints a secret (as it comes, then in an earlier and the last output line), a public
    hash, and leaves another secret in a file, which it shows; counts its runs in root/runs."""
    script = (f"echo run >> runs; echo 'uploaded {KEY}'; echo 'certKey=old-value-1'; "
              f"echo 'certKey={KEY}'; echo 'caCertHash={CA_HASH}'; "
              "mkdir -p etc; printf 'material-42\\n' > etc/bootstrap; cat etc/bootstrap")
    return exec_item("upload-certs", ["sh", "-c", script], phase=phase, outputs=[
        {"name": "certKey"}, {"name": "caCertHash", "secret": False},
        {"name": "bootstrap", "file": "/etc/bootstrap"}])


OUTPUTS = {"certKey": KEY, "caCertHash": CA_HASH, "bootstrap": "material-42"}


def runs(root: Path) -> int:
    path = root / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_a_succeeded_report_carries_the_outputs_and_its_output_shows_no_secret(
        root: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    assert await run([minting()], Journal(tmp_path / "journal.json", "m-1"), recorder, root)
    running, done = recorder.reports
    assert running.outputs is None
    assert done.outputs == OUTPUTS
    assert done.output == (f"uploaded {MASK}\ncertKey={MASK}\ncertKey={MASK}\n"
                           f"caCertHash={CA_HASH}\n{MASK}\n")


async def test_an_output_line_is_found_in_the_whole_output_not_only_the_tail(
        root: Path, tmp_path: Path) -> None:
    script = f"print('certKey={KEY}')\nfor _ in range(100): print('x' * 999)"
    recorder = Recorder()
    item = exec_item("chatty", [PYTHON, "-c", script], outputs=[{"name": "certKey"}])
    assert await run([item], Journal(tmp_path / "journal.json", "m-1"), recorder, root)
    assert recorder.reports[-1].outputs == {"certKey": KEY}
    assert "certKey=" not in recorder.reports[-1].output  # long gone from the 4 KiB tail


async def test_a_tail_cut_in_the_middle_of_a_secret_shows_none_of_it(
        root: Path, tmp_path: Path) -> None:
    filler = "y" * (4096 - len(KEY[5:]) - 2)
    script = f"print('certKey={KEY}')\nprint('pre {KEY}')\nprint('{filler}')"
    recorder = Recorder()
    item = exec_item("chatty", [PYTHON, "-c", script], outputs=[{"name": "certKey"}])
    assert await run([item], Journal(tmp_path / "journal.json", "m-1"), recorder, root)
    assert recorder.reports[-1].output == f"{MASK}\n{filler}\n"


async def test_an_output_not_produced_fails_the_item_saying_how_to_produce_it(
        root: Path, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.json", "m-1")
    silent = exec_item("join", ["sh", "-c", f"echo 'certkey={KEY}'"],
                       outputs=[{"name": "certKey"}])
    recorder = Recorder()
    assert not await run([silent], journal, recorder, root, ONCE)
    failed = recorder.reports[-1]
    assert (failed.status, failed.outputs) == ("failed", None)
    assert failed.error == 'output certKey: the item printed no line "certKey=..."'
    assert not journal.applied(silent.fingerprint())

    no_file = exec_item("init", ["true"], outputs=[{"name": "cert", "file": "/etc/x.pem"}])
    recorder = Recorder()
    assert not await run([no_file], journal, recorder, root, ONCE)
    assert recorder.reports[-1].error == \
        "output cert (/etc/x.pem): cannot read it: No such file or directory"

    written = make_item("conf", {"type": "file", "path": "/etc/a", "content": "x"},
                        outputs=[{"name": "certKey"}])
    recorder = Recorder()
    assert not await run([written], journal, recorder, root, ONCE)
    assert recorder.reports[-1].error == ("output certKey: a file item prints no lines; give "
                                          "the output a file: to read it from")
    assert not (root / "etc/a").exists()


async def test_a_failed_item_shows_no_secret_output_line_either(
        root: Path, tmp_path: Path) -> None:
    """Even a value too short to mask by value: its line says what it is."""
    item = exec_item("join", ["sh", "-c", "echo certKey=xyz; exit 3"],
                     outputs=[{"name": "certKey"}])
    recorder = Recorder()
    assert not await run([item], Journal(tmp_path / "journal.json", "m-1"), recorder, root, ONCE)
    assert recorder.reports[-1].output == f"certKey={MASK}\n"


async def test_secret_values_of_the_assignment_are_masked_in_output_and_error(
        root: Path, tmp_path: Path) -> None:
    """A token the coordinator hands out, echoed by the command that uses it, never shows; a
    secret too short to mask by value does not blank unrelated text."""
    values = {**VALUES, "join.token": "tok-5f1e2d3c", "join.pin": "1234"}
    item = exec_item("join", ["sh", "-c", "echo joining with $1 and pin $2 at 10.0.1.234; exit 1",
                              "sh", "${join.token}", "${join.pin}"])
    recorder = Recorder()
    assert not await run([item], Journal(tmp_path / "journal.json", "m-1"), recorder, root, ONCE,
                         values=values, secrets=["join.token", "join.pin"])
    assert recorder.reports[-1].output == f"joining with {MASK} and pin 1234 at 10.0.1.234\n"


async def test_a_later_item_shows_no_secret_an_earlier_one_produced(
        root: Path, tmp_path: Path) -> None:
    later = exec_item("use", ["sh", "-c", f"echo using {KEY}"])
    recorder = Recorder()
    assert await run([minting(), later], Journal(tmp_path / "journal.json", "m-1"),
                     recorder, root)
    assert recorder.reports[-1].output == f"using {MASK}\n"


async def test_the_journal_replays_the_outputs_and_an_item_whose_file_is_gone_runs_again(
        root: Path, tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    assert await run([minting()], Journal(path, "m-1"), Recorder(), root)
    assert path.stat().st_mode & 0o777 == 0o600

    again = Recorder()  # a fresh `nodeagent apply` given the same phase
    assert await run([minting()], Journal(path, "m-1"), again, root)
    assert runs(root) == 1
    assert [(r.status, r.output, r.outputs) for r in again.reports] == [
        ("succeeded", "already applied (journal)", OUTPUTS)]

    (root / "etc/bootstrap").unlink()  # file outputs are read again: gone, the item runs again
    third = Recorder()
    assert await run([minting()], Journal(path, "m-1"), third, root)
    assert runs(root) == 2
    assert third.reports[-1].outputs == OUTPUTS


@pytest.mark.parametrize("phase", ["mint", "revoke"])
async def test_job_items_are_never_journaled_and_run_each_time(
        root: Path, tmp_path: Path, phase: str) -> None:
    path = tmp_path / "journal.json"
    for _ in range(2):
        recorder = Recorder()
        assert await run([minting(phase)], Journal(path, "m-1"), recorder, root)
        assert recorder.reports[-1].outputs == OUTPUTS
    assert runs(root) == 2
    assert not path.exists()


def apply_child(root: Path, tmp_path: Path, assignment: str) -> tuple[int, str, str]:
    """`nodeagent apply` as the daemon runs it, the assignment line on its stdin (kept open:
    closed, it tells the child to stop): its exit code, stdout (reports) and stderr."""
    config = tmp_path / "agent.yaml"
    config.write_text(f"coordinator: {{url: 'http://127.0.0.1:9'}}\nstateDir: {tmp_path}/state\n")
    with subprocess.Popen([NODEAGENT, "apply", "--config", str(config), "--root", str(root)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as child:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        child.stdin.write(assignment + "\n")
        child.stdin.flush()
        code = child.wait(timeout=60)
        return code, child.stdout.read(), child.stderr.read()


def test_nodeagent_apply_reports_outputs_and_masks_the_assignments_secrets(
        root: Path, tmp_path: Path) -> None:
    join = exec_item("join", ["sh", "-c", "echo joining with $1", "sh", "${material.token}"],
                     phase="deploy")
    assignment = Assignment(machine_id="m-1", generation=1, state="Deploy", phase="deploy",
                            items=[minting("deploy"), join],
                            values={"material.token": "tok-5f1e2d3c"}, secrets=["material.token"])
    code, stdout, stderr = apply_child(root, tmp_path, assignment.model_dump_json())
    assert code == 0, stderr
    reports = [json.loads(line) for line in stdout.splitlines()]
    assert [(r["item"], r["status"], r["outputs"]) for r in reports] == [
        ("upload-certs", "running", None), ("upload-certs", "succeeded", OUTPUTS),
        ("join", "running", None), ("join", "succeeded", None)]
    assert reports[-1]["output"] == f"joining with {MASK}\n"
    assert stdout.count(KEY) == 1  # in the outputs only


def test_a_bad_assignment_is_refused_naming_its_fields_not_their_values(
        root: Path, tmp_path: Path) -> None:
    """A field this agent does not know yet may well hold a secret."""
    assignment = Assignment(machine_id="m-1", generation=1, state="Deploy", phase="deploy")
    sent = {**assignment.model_dump(mode="json"), "material": {"token": "tok-5f1e2d3c"},
            "values": {"material.token": ["tok-5f1e2d3c"]}}
    code, stdout, stderr = apply_child(root, tmp_path, json.dumps(sent))
    assert (code, stdout) == (2, "")
    assert "tok-5f1e2d3c" not in stderr
    assert "values.material.token: Input should be a valid string" in stderr
    assert "material: unknown field" in stderr
