"""A real dnsmasq answering for test names on 127.0.0.1:53 inside a network namespace.

resolv.conf has no port field, so the name server must be on port 53: inside a namespace
of its own that port is free, and nothing there can reach any other server. dnsmasq reads
no config file, no /etc/hosts, no upstream servers, and answers authoritatively for the
local domain: a name it was given resolves, any other name under the domain is NXDOMAIN.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.netns import Namespace
from tests.support.requirements import require_binary
from tests.support.waiting import wait_until


def start_dnsmasq(ns: Namespace, directory: Path, records: dict[str, str],
                  local_domain: str = "test") -> subprocess.Popen[bytes]:
    """dnsmasq on 127.0.0.1:53 in ns, serving records (name -> IPv4 address) and NXDOMAIN
    for every other name under local_domain; stopped when the namespace goes."""
    binary = require_binary("dnsmasq")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "dnsmasq.log"
    argv = [
        binary,
        "--no-daemon",  # foreground; and in this debug mode it keeps its user and forks nothing
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--port=53",
        f"--local=/{local_domain}/",
        f"--pid-file={directory}/dnsmasq.pid",
        "--log-facility=-",
        *(f"--host-record={name},{address}" for name, address in records.items()),
    ]
    with log.open("wb") as out:
        proc = ns.popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"dnsmasq exited with {proc.returncode}: {log.read_text()}")
        out = ns.run(["ss", "-Hlnu", "sport = :53"]).stdout
        return "127.0.0.1:53" in out

    # Once its socket is bound, queries wait in the socket until dnsmasq reads them.
    wait_until(listening, 10, "dnsmasq on 127.0.0.1:53")
    return proc
