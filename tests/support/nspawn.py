"""A directory tree booted with systemd as PID 1 (systemd-nspawn, its own network namespace
with only loopback), and commands run inside it: how the tests see what the packages'
scripts and units do under a real service manager."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support.process import serving
from tests.support.requirements import require_binary, require_root


@dataclass
class Container:
    init_pid: int

    def run(self, argv: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", "-t", str(self.init_pid), "-a", *argv],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def ok(self, *argv: str) -> str:
        result = self.run(argv)
        assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
        return result.stdout + result.stderr

    def active(self, unit: str) -> str:
        return self.run(["systemctl", "is-active", unit]).stdout.strip()

    def unit(self, name: str, *properties: str) -> dict[str, str]:
        out = self.ok("systemctl", "show", name, *(f"--property={p}" for p in properties))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@contextlib.contextmanager
def booted(root: Path, log: Path) -> Iterator[Container]:
    """Boot root (which must hold systemd) until systemd says it is up; power off on exit."""
    require_root()
    binary = require_binary("systemd-nspawn")
    require_binary("nsenter")
    machine = f"na-{uuid.uuid4().hex[:10]}"
    argv = [binary, "--directory", str(root), "--boot", "--machine", machine, "--register=no",
            "--keep-unit", "--private-network", "--console=passive"]
    container: list[Container] = []

    def up() -> bool:
        if not container:
            init = container_init(machine)
            if init is None:
                return False
            container.append(Container(init))
        state = container[0].run(["systemctl", "is-system-running"], timeout=10).stdout.strip()
        return state in ("running", "degraded")

    # A boot takes seconds on an idle machine; under a loaded one's contention it has taken
    # over 90 s. The bound only decides when a boot that never finishes fails the test.
    with serving(argv, log, up, "systemd booting in systemd-nspawn", timeout=180, interval=0.5):
        yield container[0]


def container_init(machine: str) -> int | None:
    """The host pid of the container's PID 1, once it exists.

    Not simply nspawn's first child: nspawn forks an outer child that forks the container's
    init and exits, and a test that caught the outer child would wait on a dead pid forever.
    The init is the descendant whose pid inside its own pid namespace is 1."""
    for proc in psutil.process_iter(["cmdline"]):
        if machine not in (proc.info["cmdline"] or []):
            continue
        for child in proc.children(recursive=True):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{child.pid}/status").read_text()
                nspid = next(line.split()[1:] for line in status.splitlines()
                             if line.startswith("NSpid:"))
                if len(nspid) > 1 and nspid[-1] == "1":
                    return child.pid
    return None
