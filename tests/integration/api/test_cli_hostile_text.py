"""Hostile text from nodes and old records, through a real coordinator, into every CLI view:
no escape sequence reaches the terminal raw, no markup is interpreted and no embedded newline
forges a row of a table."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.api.test_cli import watch_status
from tests.support.builders import node_facts
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.terminal import read_terminal

# Clears the screen (ESC and C1 CSI), sets the window title (OSC), rings, deletes, and carries
# rich markup and a line that would read as another machine's row.
ATTACK = ("\x1b[2J\x9b2J\x1b]0;owned\x07\x7f[link=http://x]evil[/link][bold]b[/bold]:smile:"
          "\nforged   10.9.9.9   worker   Ready")
SHOWN = ("\\x1b[2J\\x9b2J\\x1b]0;owned\\x07\\x7f[link=http://x]evil[/link][bold]b[/bold]:smile:"
         "\\nforged   10.9.9.9   worker   Ready")
HOSTNAME = "w2" + ATTACK  # a record from before registrations checked hostnames
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but the lines' own newlines


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedCoordinator, str]]:
    """w1 failing an item with a hostile error and output; w2 stored under a hostile hostname,
    its disk named by its node in hostile text."""
    with running_coordinator(tmp_path_factory.mktemp("hostile")) as served:
        w1 = served.register("w1")
        facts = node_facts()
        facts["block_devices"][1]["model"] = ATTACK
        w2 = served.register("w2", facts=facts)
        served.cli("approve", "w1", "--role", "worker")
        served.wait_state("w1", "Prepare")
        served.report_item(w1, "runtime", "failed", exit_code=1, error=ATTACK,
                           output=f"fine\n{ATTACK.splitlines()[0]}\tafter a tab\r\n")
        served.stop()
        with sqlite3.connect(served.data / "coordinator.db") as db:
            db.execute("UPDATE machines SET hostname = ?, doc = json_set(doc, '$.hostname', ?) "
                       "WHERE id = ?", (HOSTNAME, HOSTNAME, w2["machine_id"]))
            db.execute("UPDATE events SET hostname = ?, message = replace(message, 'w2', ?) "
                       "WHERE machine = ?", (HOSTNAME, HOSTNAME, w2["machine_id"]))
        db.close()
        served.start()
        yield served, w2["machine_id"]


def assert_safe(shown: str) -> None:
    """Shown escaped, markup and all (perhaps folded in a cell), never raw, never a row."""
    assert not RAW_CONTROL.search(shown), repr(shown)
    assert "".join(SHOWN.split()) in "".join(shown.split()), shown
    assert not any(line.startswith("forged") for line in shown.splitlines()), shown


@pytest.mark.parametrize("command", [
    ("machines",), ("machines", "--show-labels"), ("machines", "logs", "w1"), ("events",),
    ("status", "lab"), ("cluster", "render", "lab"),
])
def test_every_view_shows_hostile_text_escaped_and_never_as_markup(
        hostile: tuple[ServedCoordinator, str], command: tuple[str, ...]) -> None:
    served, _ = hostile
    result = served.cli(*command)
    assert_safe(result.stdout)
    assert not RAW_CONTROL.search(result.stderr)


def test_an_items_output_keeps_its_lines_with_everything_else_escaped(
        hostile: tuple[ServedCoordinator, str]) -> None:
    served, _ = hostile
    shown = served.cli("machines", "logs", "w1").stdout.splitlines()
    assert shown[1] == "fine" and len(shown) == 3, shown
    assert shown[2].startswith(SHOWN.split("\\n")[0] + " ") and shown[2].endswith(" after a tab\\r")


def test_one_machine_in_full_shows_its_hostile_name_and_disk_escaped(
        hostile: tuple[ServedCoordinator, str]) -> None:
    served, w2 = hostile
    shown = served.cli("machines", "get", w2).stdout
    assert_safe(shown)
    # its name in the table, its disk's model below
    assert "".join(shown.split()).count("".join(SHOWN.split())) == 2


def test_the_live_status_view_escapes_names_in_a_terminal(
        hostile: tuple[ServedCoordinator, str]) -> None:
    served, _ = hostile
    watch, main = watch_status(served, 400)
    try:
        screen = read_terminal(main, "forged   10.9.9.9")
        for raw in ("\x1b[2J", "\x1b]0;", "\x9b", "\x07", "\x7f", "\x1b]8;"):  # 8: a hyperlink
            assert raw not in screen, (raw, screen)
        assert "[link=http://x]evil[/link][bold]b[/bold]:smile:" in screen
        assert "\\x1b]0;owned\\x07" in screen
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=10)
        os.close(main)


def test_shell_completion_leaves_a_hostile_name_out(hostile: tuple[ServedCoordinator, str]) -> None:
    served, _ = hostile
    env = {**os.environ, "_COORDINATOR_COMPLETE": "bash_complete",
           "COMP_WORDS": "coordinator machines logs ", "COMP_CWORD": "3",
           "COORDINATOR_URL": served.url, "COORDINATOR_TOKEN_FILE": str(served.token_file),
           "COORDINATOR_CA": str(served.ca_file)}
    result = subprocess.run([served.cli_argv()[0]], env=env, capture_output=True, text=True,
                            timeout=30, check=True)
    assert result.stdout == "plain,w1\n"
