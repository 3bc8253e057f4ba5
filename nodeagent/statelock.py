"""One agent per state directory. Two agents on one state dir would share an identity and a
journal: each would run the items the other is running, and race it renaming the journal.

`nodeagent run` takes an exclusive flock on stateDir/agent.lock before it reads anything
there, and holds it for its life; the kernel drops it when the process dies, `kill -9`
included, so a restart is never refused by a dead agent. Its `nodeagent apply` children
inherit the lock (they write the journal and the cache), so the lock is free only once no
process of that agent can still write the state dir. The file holds the daemon's pid, for
the message that refuses another agent.

Standard library only, like the daemon that takes it.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from pathlib import Path

from nodeagent.children import STOP_SECONDS, AgentError

LOCK_FILE = "agent.lock"  # in the state dir
log = logging.getLogger("nodeagent")


class StateDirBusy(AgentError):
    """Another agent holds the state dir."""


async def lock_state_dir(state_dir: Path) -> int:
    """The state dir, created if need be, locked for this process: the lock's descriptor
    (close-on-exec; hand it to the children that write the state dir). An agent running on
    it is refused at once, naming its pid; the child of an agent that died, still stopping
    its item, is waited for (it stops within STOP_SECONDS)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise AgentError(f"cannot lock the state dir {state_dir}: {exc.strerror}") from None
    try:
        deadline = None
        while not _try_lock(fd):
            holder = _holder(fd)
            if holder is not None and _alive(holder):
                raise StateDirBusy(f"another agent (pid {holder}) is running on {state_dir}; "
                                   "stop it first (systemctl stop nodeagent)")
            gone = f"the agent (pid {holder or '?'}) that ran on {state_dir} is gone"
            if deadline is None:
                log.info("%s; waiting up to %gs for the processes it started to stop", gone,
                         STOP_SECONDS)
                deadline = time.monotonic() + STOP_SECONDS
            elif time.monotonic() > deadline:
                raise StateDirBusy(f"{gone}, but a process it started still holds {LOCK_FILE} "
                                   "there; stop it first")
            await asyncio.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(fd: int) -> int | None:
    """The pid the holder wrote; None before it has."""
    try:
        pid = int(os.pread(fd, 32, 0))
    except ValueError:
        return None
    return pid if pid > 0 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
