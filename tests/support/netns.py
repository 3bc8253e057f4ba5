"""Network namespaces as test nodes: each with its own loopback, optionally its own hostname.

Only addresses inside namespaces created here (and loopback) are ever used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tests.support.requirements import require_binary, require_root


def with_hostname(name: str, argv: Sequence[str]) -> list[str]:
    """argv run in a UTS namespace of its own, whose hostname is name (root only)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name, *argv]


@dataclass
class Namespace:
    name: str
    hostname: str | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, argv: Sequence[str], hostname: str | None = None) -> list[str]:
        """argv run inside the namespace; with a hostname, also in its own UTS namespace."""
        name = hostname or self.hostname
        prefix = ["ip", "netns", "exec", self.name]
        return [*prefix, *(with_hostname(name, argv) if name else argv)]

    def run(self, argv: Sequence[str], hostname: str | None = None, timeout: float = 30,
            **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(argv, hostname), capture_output=True, text=True,
                              timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]

    def popen(self, argv: Sequence[str], hostname: str | None = None,
              **kwargs: object) -> subprocess.Popen[bytes]:
        """Start a long-running process inside the namespace; stopped when the namespace goes."""
        proc = subprocess.Popen(self.argv(argv, hostname), start_new_session=True,
                                **kwargs)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        # Anything else still running inside (e.g. a daemon that forked) goes too.
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                              text=True, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)


@contextlib.contextmanager
def namespace(hostname: str | None = None) -> Iterator[Namespace]:
    """A fresh namespace with loopback up; deleted, with its processes, on exit."""
    require_root()
    require_binary("ip")
    require_binary("unshare")
    name = f"na-{uuid.uuid4().hex[:10]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    ns = Namespace(name, hostname)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield ns
    finally:
        ns.stop()
