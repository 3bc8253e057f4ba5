"""The one seam between node-side logic and the machine.

Files are read under a configurable root (like node_exporter's --path.rootfs) so
tests point the agent at a temp tree instead of mocking functions. The process
table and sockets are the live kernel's: they cannot be faked by a file tree and
tests use real processes instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    name: str
    exe: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class Listener:
    """A bound socket: TCP in LISTEN state, or any bound UDP socket."""

    protocol: str  # "tcp" or "udp"
    address: str
    port: int
    pid: int | None


class Host:
    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._processes: list[ProcessInfo] | None = None
        self._listeners: list[Listener] | None = None

    # -- files under root ---------------------------------------------------
    def path(self, path: str) -> Path:
        """Map an absolute machine path to its place under root."""
        relative = PurePosixPath(path).relative_to("/")
        return self.root / relative

    def read_text(self, path: str) -> str | None:
        """File contents, or None when it does not exist or cannot be read."""
        try:
            return self.path(path).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return self.path(path).exists()

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []

    def is_socket(self, path: str) -> bool:
        try:
            return stat.S_ISSOCK(self.path(path).stat().st_mode)
        except OSError:
            return False

    def free_bytes(self, path: str) -> int | None:
        """Free space available to unprivileged users on the filesystem holding path."""
        target = self.path(path)
        while not target.exists() and target != self.root:
            target = target.parent
        try:
            st = os.statvfs(target)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def which(self, name: str, dirs: tuple[str, ...]) -> str | None:
        """Machine path of an executable named name in one of dirs, looked up under root."""
        for directory in dirs:
            candidate = self.path(f"{directory}/{name}")
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return f"{directory}/{name}"
        return None

    # -- commands -----------------------------------------------------------
    async def run(self, argv: list[str], timeout: float = 10.0) -> CommandResult:
        """Run argv (never through a shell); a missing binary is returncode 127."""
        if shutil.which(argv[0]) is None and not os.path.isabs(argv[0]):
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: command not found")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return CommandResult(
            tuple(argv), proc.returncode or 0, out.decode(errors="replace"),
            err.decode(errors="replace"),
        )

    # -- clock and identity -------------------------------------------------
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def kernel_hostname(self) -> str:
        return socket.gethostname()

    def kernel_release(self) -> str:
        return os.uname().release

    # -- live kernel state (snapshotted once per Host) ----------------------
    def processes(self) -> list[ProcessInfo]:
        with self._lock:
            if self._processes is None:
                self._processes = _scan_processes()
            return self._processes

    def listeners(self) -> list[Listener]:
        with self._lock:
            if self._listeners is None:
                self._listeners = _scan_listeners()
            return self._listeners


def _scan_processes() -> list[ProcessInfo]:
    import psutil  # lazily: the idle daemon never needs it

    found = []
    for proc in psutil.process_iter(["pid", "name", "exe", "cmdline"]):
        info = proc.info
        found.append(
            ProcessInfo(
                pid=info["pid"],
                name=info["name"] or "",
                exe=info["exe"] or "",
                cmdline=tuple(info["cmdline"] or ()),
            )
        )
    return found


def _scan_listeners() -> list[Listener]:
    import psutil

    found = []
    for conn in psutil.net_connections(kind="inet"):
        if not conn.laddr:
            continue
        if conn.type == socket.SOCK_STREAM:
            if conn.status != psutil.CONN_LISTEN:
                continue
            protocol = "tcp"
        else:
            protocol = "udp"
        found.append(Listener(protocol, conn.laddr.ip, conn.laddr.port, conn.pid))
    return found
