"""A command run in a pseudo-terminal, and what it draws there: how the tests read
`status --watch` as an operator's terminal shows it."""

from __future__ import annotations

import os
import pty
import select
import subprocess

from tests.support.waiting import wait_until


def in_terminal(argv: list[str], columns: int) -> tuple[subprocess.Popen[bytes], int]:
    """argv run in a terminal that wide: the process, and the terminal to read."""
    main, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "60", "TERM": "xterm-256color"}
    process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    return process, main


def read_terminal(fd: int, until: str, timeout: float = 15) -> str:
    seen = [""]

    def shown() -> bool:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            seen[0] += os.read(fd, 65536).decode(errors="replace")
        return until in seen[0]

    wait_until(shown, timeout, lambda: f"{until!r} on the screen; screen so far:\n{seen[0][-3000:]}",
               interval=0)
    return seen[0]
