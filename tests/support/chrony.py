"""A real chronyd serving NTP on 127.0.0.1 at an unprivileged port, from a temp directory.

It never touches the system clock (-x), keeps every file it writes in the directory given,
opens no command sockets, and serves its own clock at stratum 8 (`local`), so it answers at
once without any upstream server. Without `local` it answers too, but as a server that is
not synchronised itself (leap indicator 3, stratum 0), as one that lost its upstream does.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import ntplib

from tests.support.ports import free_port
from tests.support.process import serving
from tests.support.requirements import require_binary


def answers(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """Whether an NTP server on host:port answers one client query."""
    try:
        ntplib.NTPClient().request(host, version=4, port=port, timeout=timeout)
    except (ntplib.NTPException, OSError):
        return False
    return True


@contextlib.contextmanager
def chronyd(directory: Path, local_stratum: int | None = 8) -> Iterator[int]:
    """Start chronyd on 127.0.0.1; yield its NTP port once it answers; stop it on exit.

    local_stratum None: no time source at all, so it serves as unsynchronised."""
    binary = require_binary("chronyd")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port(socket.SOCK_DGRAM)
    conf = directory / "chrony.conf"
    lines = [
        f"port {port}",
        "bindaddress 127.0.0.1",
        "allow 127.0.0.1",
        f"driftfile {directory}/drift",
        f"pidfile {directory}/chronyd.pid",
        "cmdport 0",
        "bindcmdaddress /",  # no Unix command socket either: concurrent chronyds do not clash
    ]
    if local_stratum is not None:
        lines.append(f"local stratum {local_stratum}")
    conf.write_text("\n".join(lines) + "\n")
    argv = [binary, "-x", "-d", "-f", str(conf), "-u", "root"]
    with serving(argv, directory / "chronyd.log", lambda: answers(port),
                 f"chronyd on 127.0.0.1:{port}"):
        yield port
