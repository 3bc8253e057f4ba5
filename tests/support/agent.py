"""Running the installed `nodeagent` command the way an operator does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# The console script installed next to the interpreter running the tests (the venv's).
NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))


def precheck_argv(root: Path | str, *args: str, own_pids: bool = False) -> list[str]:
    """`nodeagent precheck --root root args...`; with own_pids, in a fresh PID namespace
    with its own /proc, so only the agent's own processes are in its process table."""
    argv = [NODEAGENT, "precheck", "--root", str(root), *args]
    if own_pids:
        argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv]
    return argv


def checks_by_name(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """The checks of a `--output json` run, by name; fails loudly on anything but JSON."""
    assert result.returncode in (0, 1), (result.returncode, result.stderr)
    report = json.loads(result.stdout)
    return {check["name"]: check for check in report["checks"]}
