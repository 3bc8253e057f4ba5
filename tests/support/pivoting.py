"""Driving `coordinator pivot` from tests: its command line, and a run of it interrupted by a
kill -9 of either coordinator once it says it takes a given step."""

from __future__ import annotations

import os
import subprocess
import time

from nodeagent.wire import joinstring
from tests.support.harness import ServedCoordinator

STEPS = ("frozen", "copied", "announced", "done")


def pivot_argv(old: ServedCoordinator, new: ServedCoordinator, to_url: str | None = None,
               *args: str, pinned: bool = False) -> list[str]:
    """`coordinator pivot` from old to new (at to_url: where agents reach it, by default its
    URL), trusting new's CA file (pinned: its pin, as join strings carry it)."""
    ca = joinstring.ca_hash(new.ca_file.read_text()) if pinned else str(new.ca_file)
    return old.cli_argv("pivot", "--to", to_url or new.url, "--to-token-file",
                        str(new.token_file), "--to-ca", ca, *args)


def interrupted(argv: list[str], step: str | None, victim: ServedCoordinator,
                delay: float = 0.0) -> str:
    """argv (a pivot) run until it says it takes step (None: whichever step it takes first,
    when the pivot is resumed from where an interruption left it), then, delay seconds later,
    victim killed -9 and served again from its data dir; what the command said. It must have
    failed saying why (or finished first), never with a traceback."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}) as command:
        assert command.stdout is not None and command.stderr is not None
        said = ""
        for line in command.stdout:
            said += line
            if f"] {step or ''}" in line and ": " in line:
                break
        time.sleep(delay)
        victim.stop(crash=True)
        said += command.stdout.read()
        failed = command.wait(timeout=120)
        said += command.stderr.read()
    victim.start()
    assert f"] {step}: " in said if step else "] " in said, said
    # 1: cut off, saying why; 0: the step (the last) was done before the kill landed
    assert failed in (0, 1) and "Traceback" not in said, said
    return said
