"""Peak memory of the processes a test or a bench starts: what a hostile input made them
hold, read from the kernel (a process's high-water mark), not estimated."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def peak_rss_mib(pid: int) -> float:
    """The high-water mark of a running process's resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mib: float


def run_measured(argv: Sequence[str], timeout: float = 120) -> Run:
    """argv run to its end (killed after timeout seconds), with its output and its peak
    resident memory (wait4's maxrss: the kernel's own account of that child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Run(process.returncode, out.read().decode(), err.read().decode(),
                   usage.ru_maxrss / 1024)
