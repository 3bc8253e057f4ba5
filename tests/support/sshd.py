"""A real OpenSSH sshd on 127.0.0.1 at a free port, logging in root with a test key into a
chroot: the "host" a test bootstraps is a directory tree, never this machine.

sshd demands that the chroot and every directory above it be root-owned and writable by
no one else, which /tmp (mode 1777) is not: callers put the chroot under /run.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port
from tests.support.process import serving
from tests.support.requirements import require_binary, require_root


@dataclass
class Sshd:
    port: int
    client_key: Path
    host_key: str  # the public key, "ssh-ed25519 AAAA..."
    known_hosts: Path
    log: Path

    @property
    def target(self) -> str:
        return f"root@127.0.0.1:{self.port}"


def keypair(path: Path) -> str:
    """A new ed25519 key at path (no passphrase); returns the public key line."""
    subprocess.run([require_binary("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", "test",
                    "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def sshd(directory: Path, chroot: Path) -> Iterator[Sshd]:
    require_root()
    binary = require_binary("sshd")
    directory.mkdir(parents=True, exist_ok=True)
    host_key = keypair(directory / "host_key")
    client_pub = keypair(directory / "client_key")
    (directory / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    (directory / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    (directory / "sshd_config").write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {directory}/host_key",
        f"PidFile {directory}/sshd.pid",
        f"AuthorizedKeysFile {directory}/authorized_keys",
        "StrictModes no",  # the key files are in a pytest temp dir under /tmp
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        f"ChrootDirectory {chroot}",
        "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE",
    ]) + "\n")
    # The privilege separation directory the openssh-server service creates at boot.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = directory / "sshd.log"
    argv = [binary, "-D", "-e", "-f", str(directory / "sshd_config")]
    with serving(argv, log, lambda: _accepts(port), f"sshd on 127.0.0.1:{port}"):
        yield Sshd(port, directory / "client_key", host_key, directory / "known_hosts", log)
