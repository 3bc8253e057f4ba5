"""dns-port against real sockets: a process holds port 53 inside a fresh network namespace
and `nodeagent precheck` run in that namespace names it (psutil reads the sockets of the
namespace the agent runs in)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent import checks_by_name, precheck_argv
from tests.support.netns import Namespace, namespace
from tests.support.requirements import require_binary
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

HOSTNAME = "dns-node"
# Binds 127.0.0.1:53 with the protocol given as argv[1], then says so and waits.
HOLDER = """
import socket, sys, time
tcp = sys.argv[1] == "tcp"
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 53))
if tcp:
    sock.listen()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Namespace, Path]]:
    """A namespace named HOSTNAME and a root on which every file-based check passes."""
    root = passing_root(tmp_path / "root", HOSTNAME)
    with namespace(hostname=HOSTNAME) as ns:
        yield ns, root


def start_holder(ns: Namespace, tmp_path: Path, name: str, protocol: str) -> int:
    """A python process whose process name is name (the kernel names a process after the
    file it executed, here a symlink to the interpreter) holding port 53 over protocol."""
    program = tmp_path / name
    program.symlink_to(os.path.realpath(sys.executable))
    proc = ns.popen([str(program), "-c", HOLDER, protocol], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n", f"{name} could not bind port 53/{protocol}"
    return proc.pid


def wait_for_port_53(ns: Namespace, protocols: set[str], timeout: float = 5) -> None:
    out = [""]

    def bound() -> bool:
        out[0] = ns.run(["ss", "-Hlntu", "sport = :53"]).stdout
        return {line.split()[0] for line in out[0].splitlines()} >= protocols

    wait_until(bound, timeout, lambda: f"port 53 bound for {protocols} (ss: {out[0]!r})")


def precheck(ns: Namespace, root: Path) -> subprocess.CompletedProcess[str]:
    return ns.run(precheck_argv(root, "--output", "json"))


def test_free_port_53_passes(node: tuple[Namespace, Path]) -> None:
    ns, root = node
    result = precheck(ns, root)
    check = checks_by_name(result)["dns-port"]
    assert check["status"] == "pass", check
    assert check["message"] == "port 53 is free on TCP and UDP"
    assert result.returncode == 0, result.stdout


def test_tcp_holder_is_named(node: tuple[Namespace, Path], tmp_path: Path) -> None:
    ns, root = node
    pid = start_holder(ns, tmp_path, "fakedns-tcp", "tcp")
    result = precheck(ns, root)
    check = checks_by_name(result)["dns-port"]
    assert result.returncode == 1
    assert check["status"] == "fail"
    assert check["data"]["holders"] == [
        {"protocol": "tcp", "address": "127.0.0.1", "pid": pid, "process": "fakedns-tcp"}
    ]
    assert f"TCP 127.0.0.1:53 by fakedns-tcp (pid {pid})" in check["message"]
    assert "UDP" not in check["message"]
    assert check["remedy"].startswith("stop and disable fakedns-tcp")
    assert "systemd-resolved" not in check["remedy"]


def test_udp_only_holder_is_named(node: tuple[Namespace, Path], tmp_path: Path) -> None:
    ns, root = node
    pid = start_holder(ns, tmp_path, "fakedns-udp", "udp")
    result = precheck(ns, root)
    check = checks_by_name(result)["dns-port"]
    assert result.returncode == 1
    assert check["status"] == "fail"
    assert check["data"]["holders"] == [
        {"protocol": "udp", "address": "127.0.0.1", "pid": pid, "process": "fakedns-udp"}
    ]
    assert f"UDP 127.0.0.1:53 by fakedns-udp (pid {pid})" in check["message"]
    assert "TCP" not in check["message"]
    assert "fakedns-udp" in check["remedy"]


def test_dnsmasq_on_both_protocols_is_named(node: tuple[Namespace, Path]) -> None:
    dnsmasq = require_binary("dnsmasq")
    require_binary("ss")
    ns, root = node
    proc = ns.popen(
        [dnsmasq, "--no-daemon", "--conf-file=/dev/null", "--port=53",
         "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
         "--log-facility=-"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port_53(ns, {"tcp", "udp"})

    result = precheck(ns, root)
    check = checks_by_name(result)["dns-port"]
    assert result.returncode == 1
    assert check["status"] == "fail"
    assert check["data"]["holders"] == [
        {"protocol": "tcp", "address": "127.0.0.1", "pid": proc.pid, "process": "dnsmasq"},
        {"protocol": "udp", "address": "127.0.0.1", "pid": proc.pid, "process": "dnsmasq"},
    ]
    assert f"TCP 127.0.0.1:53 by dnsmasq (pid {proc.pid})" in check["message"]
    assert f"UDP 127.0.0.1:53 by dnsmasq (pid {proc.pid})" in check["message"]
    assert check["remedy"].startswith("stop and disable dnsmasq")


def test_port_53_in_another_namespace_does_not_count(
    node: tuple[Namespace, Path], tmp_path: Path
) -> None:
    ns, root = node
    with namespace() as other:
        start_holder(other, tmp_path, "elsewhere-dns", "tcp")
        check = checks_by_name(precheck(ns, root))["dns-port"]
    assert check["status"] == "pass", check


def test_holder_outside_the_agents_pid_namespace_is_unknown(
    node: tuple[Namespace, Path], tmp_path: Path
) -> None:
    # An agent in a container sharing the host's network but not its PIDs sees the socket
    # and not its owner: it must still fail, and say how to find the owner.
    ns, root = node
    start_holder(ns, tmp_path, "hidden-dns", "udp")
    result = ns.run(precheck_argv(root, "--output", "json", own_pids=True))
    check = checks_by_name(result)["dns-port"]
    assert result.returncode == 1
    assert check["data"]["holders"] == [
        {"protocol": "udp", "address": "127.0.0.1", "pid": None, "process": "unknown"}
    ]
    assert "UDP 127.0.0.1:53 by an unknown process" in check["message"]
    assert check["remedy"] == "find the unnamed holder with `ss -lntup 'sport = :53'` and stop it"
