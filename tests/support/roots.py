"""Fake machine roots for `nodeagent precheck --root` and the checks' unit tests.

passing_root builds a tree on which every file-based check passes. The checks that read
the live kernel (processes, sockets, the free space of the filesystem holding the tree,
the kernel hostname) are up to the caller: run the agent in a fresh network namespace
whose hostname is the one given here.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

from nodeagent.prechecks.base import CheckContext
from nodeagent.prechecks.runtime import RECOMMENDED_BINARIES, REQUIRED_BINARIES

OS_RELEASE_DEBIAN_12 = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
"""
MEMINFO_KIB = 4 * 1024 * 1024  # 4 GiB: above both roles' minimums
RUNTIME_SOCKET = "/run/containerd/containerd.sock"

# The `make_ctx` fixture: a check context over the root tree, for a role and config keys.
MakeContext = Callable[..., CheckContext]
# The `bind_socket` fixture: a listening unix socket at a path in a tree.
BindSocket = Callable[[Path], None]


class RootTree:
    """A fake machine root: files written and directories made by their path on the machine."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write(self, machine_path: str, text: str = "", mode: int | None = None) -> Path:
        target = self.path / machine_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if mode is not None:
            target.chmod(mode)
        return target

    def mkdir(self, machine_path: str) -> Path:
        target = self.path / machine_path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        return target


def cpuinfo(processors: int) -> str:
    return "".join(
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\n\n"
        for n in range(processors)
    )


def passing_root(path: Path, hostname: str, cpus: int = 2) -> Path:
    """A machine root at path on which every file-based check passes for hostname."""
    tree = RootTree(path)
    write = tree.write
    write("/etc/os-release", OS_RELEASE_DEBIAN_12)
    write("/etc/hostname", f"{hostname}\n")
    write("/etc/hosts", f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n")
    write("/etc/resolv.conf", "nameserver 127.0.0.1\noptions edns0 timeout:1\n")
    write("/proc/sys/net/ipv4/ip_forward", "1\n")
    write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
    write("/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
    write("/proc/cpuinfo", cpuinfo(cpus))
    write("/proc/meminfo", f"MemTotal: {MEMINFO_KIB} kB\nMemFree: {MEMINFO_KIB // 2} kB\n")
    write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    # The firmware's UUID, one per hostname: machines of a fleet are not clones.
    write("/sys/class/dmi/id/product_uuid", f"{uuid.uuid5(uuid.NAMESPACE_DNS, hostname)}\n")
    tree.mkdir("/var/lib")
    for name in (*REQUIRED_BINARIES, *RECOMMENDED_BINARIES):
        write(f"/usr/bin/{name}", "#!/bin/sh\nexit 0\n", mode=0o755)
    # A socket inode without a listener: the check only asks whether the runtime's socket
    # exists, and mknod avoids bind()'s 108-byte limit on socket paths.
    tree.mkdir(os.path.dirname(RUNTIME_SOCKET))
    os.mknod(path / RUNTIME_SOCKET.lstrip("/"), stat.S_IFSOCK | 0o660)
    return path
