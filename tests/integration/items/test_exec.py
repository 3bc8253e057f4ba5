"""The exec action with real processes: no shell, templated argv and env, exit codes,
timeouts and cancellation that kill the whole process group, a bounded output tail."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import psutil
import pytest

from tests.support.items import PYTHON, apply, exec_item
from tests.support.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.integration

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def gone(pid: int, within: float = 5.0) -> bool:
    """The process stops running within a few seconds (SIGKILL is delivered asynchronously;
    a zombie not yet reaped by init counts as gone)."""
    def stopped() -> bool:
        try:
            return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    return wait_until(stopped, within, f"process {pid} gone", interval=0.02)


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    await wait_until_async(lambda: path.exists() and path.read_text().strip(), timeout,
                           f"{path} with text", interval=0.02)
    return path.read_text()


async def test_success_captures_stdout_and_stderr_in_order(root: Path) -> None:
    outcome = await apply(exec_item("x", ["sh", "-c", "echo one; echo two >&2; echo three"]), root)
    assert outcome.succeeded
    assert outcome.exit_code == 0
    assert outcome.output == "one\ntwo\nthree\n"
    assert outcome.error == ""
    assert outcome.duration > 0


async def test_an_expected_nonzero_exit_code_succeeds(root: Path) -> None:
    item = exec_item("x", ["sh", "-c", "exit 3"], expectedExitCodes=[0, 3])
    outcome = await apply(item, root)
    assert outcome.succeeded
    assert outcome.exit_code == 3


async def test_an_unexpected_exit_code_fails_with_code_and_output(root: Path) -> None:
    item = exec_item("x", ["sh", "-c", "echo broken >&2; exit 1"], expectedExitCodes=[0, 3])
    outcome = await apply(item, root)
    assert not outcome.succeeded
    assert outcome.exit_code == 1
    assert outcome.output == "broken\n"
    assert outcome.error == "sh exited with 1 (expected 0, 3)"


async def test_arguments_are_templated_one_by_one_and_never_reach_a_shell(
    root: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("still here")
    values = {"cluster.name": "edge 1", "evil": f"x; rm -rf {victim}; $(touch {victim}.2)"}
    argv = [PYTHON, "-c", PRINT_ARGV, "${cluster.name}", "${evil}", "$$HOME", "$HOME", "*"]
    outcome = await apply(exec_item("x", argv), root, values)
    assert outcome.succeeded, outcome.error
    assert json.loads(outcome.output) == [
        "edge 1", f"x; rm -rf {victim}; $(touch {victim}.2)", "$HOME", "$HOME", "*",
    ]
    assert victim.read_text() == "still here"
    assert not Path(f"{victim}.2").exists()


async def test_env_values_are_templated_on_top_of_the_agents_environment(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEAGENT_TEST_INHERITED", "inherited")
    item = exec_item("x", ["sh", "-c", 'echo "$GREETING/$NODEAGENT_TEST_INHERITED"'],
                     env={"GREETING": "hello ${machine.hostname}"})
    outcome = await apply(item, root)
    assert outcome.output == "hello node-a/inherited\n"


async def test_it_runs_in_the_root_or_in_cwd_under_the_root(root: Path) -> None:
    (root / "srv/edge-1").mkdir(parents=True)
    item = exec_item("x", ["pwd"], cwd="/srv/${cluster.name}")
    assert (await apply(item, root)).output == f"{root}/srv/edge-1\n"
    assert (await apply(exec_item("x", ["pwd"]), root)).output == f"{root}\n"


async def test_a_missing_cwd_or_binary_is_a_clear_failure(root: Path) -> None:
    missing_dir = await apply(exec_item("x", ["true"], cwd="/nowhere"), root)
    assert not missing_dir.succeeded
    assert missing_dir.error == f"cannot run true in {root / 'nowhere'}: No such file or directory"
    missing_binary = await apply(exec_item("x", ["/nonexistent/tool", "--flag"]), root)
    assert missing_binary.error == "cannot run /nonexistent/tool: No such file or directory"


async def test_an_unknown_template_value_fails_before_anything_runs(
    root: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    outcome = await apply(exec_item("x", ["touch", str(marker), "${cluster.nmae}"]), root)
    assert not outcome.succeeded
    assert "unknown template value ${cluster.nmae}" in outcome.error
    assert not marker.exists()


async def test_only_the_last_4_kib_of_a_huge_output_is_kept(root: Path) -> None:
    script = "import sys\nfor _ in range(2000): sys.stdout.write('x' * 4999 + '\\n')\nprint('END')"
    outcome = await apply(exec_item("x", [PYTHON, "-c", script]), root)
    assert outcome.succeeded
    assert len(outcome.output.encode()) == 4096
    assert outcome.output.endswith("x\nEND\n")


async def test_a_timeout_kills_the_whole_process_group_and_keeps_the_output(
    root: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; echo started; wait"
    started = time.monotonic()
    outcome = await apply(exec_item("x", ["sh", "-c", script], timeout=1), root)
    assert time.monotonic() - started < 10
    assert not outcome.succeeded
    assert outcome.error == "sh timed out after 1s; its process group was killed"
    assert outcome.output == "started\n"
    assert outcome.exit_code is None
    assert gone(int(pidfile.read_text()))


async def test_a_timeout_also_kills_children_holding_the_output_open(
    root: Path, tmp_path: Path
) -> None:
    """The first process exits at once; a background child keeps stdout open."""
    pidfile = tmp_path / "child.pid"
    outcome = await apply(
        exec_item("x", ["sh", "-c", f"sleep 300 & echo $! > {pidfile}"], timeout=1), root
    )
    assert "timed out" in outcome.error
    assert gone(int(pidfile.read_text()))


async def test_cancelling_a_running_item_kills_its_process_group(
    root: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    task = asyncio.create_task(apply(exec_item(
        "x", ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"]), root))
    pid = int(await wait_for_file(pidfile))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pid)
