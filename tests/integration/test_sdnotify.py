"""sd_notify against a real unix datagram socket, as systemd listens on one."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent import sdnotify
from tests.support.agent import NODEAGENT
from tests.support.ports import free_port
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A socket at a short path (bind() takes at most 108 bytes) named by NOTIFY_SOCKET."""
    with tempfile.TemporaryDirectory(prefix="sdn-", dir="/tmp") as directory:
        path = Path(directory) / "notify"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            sock.settimeout(5)
            monkeypatch.setenv("NOTIFY_SOCKET", str(path))
            yield sock


def test_without_systemd_notify_does_nothing() -> None:
    assert sdnotify.notify("READY=1") is False
    assert sdnotify.ready() is False


def test_ready_status_and_watchdog_arrive_as_datagrams(listener: socket.socket) -> None:
    assert sdnotify.ready()
    assert sdnotify.status("prepare: 3 items")
    assert sdnotify.watchdog()
    received = [listener.recv(4096) for _ in range(3)]
    assert received == [b"READY=1", b"STATUS=prepare: 3 items", b"WATCHDOG=1"]


def test_an_abstract_socket_is_named_with_an_at_sign(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"nodeagent-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.ready()
        assert sock.recv(4096) == b"READY=1"


def test_a_vanished_socket_is_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert sdnotify.status("still running") is False


@pytest.mark.parametrize(("usec", "pid", "interval"), [
    ("20000000", None, 10.0),
    ("20000000", "self", 10.0),
    ("20000000", "1", None),  # the watchdog is meant for another process
    ("0", None, None),
    ("soon", None, None),
    (None, None, None),
])
def test_the_watchdog_interval_is_half_the_timeout(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, interval: float | None
) -> None:
    if usec is not None:
        monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid is not None:
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()) if pid == "self" else pid)
    assert sdnotify.watchdog_interval() == interval


def test_the_agent_is_ready_and_pets_the_watchdog_while_the_coordinator_is_away(
    listener: socket.socket, tmp_path: Path
) -> None:
    """`nodeagent run` as systemd starts it (Type=notify, WatchdogSec=2s): READY at once,
    even though it cannot register yet, and a WATCHDOG ping well within every 2 s."""
    root = passing_root(tmp_path / "root", "node-1")
    config = tmp_path / "config.yaml"
    config.write_text(f"coordinator: {{url: 'http://127.0.0.1:{free_port()}'}}\n"
                      f"joinToken: join_x\nstateDir: {tmp_path}/state\n")
    env = {**os.environ, "NOTIFY_SOCKET": os.environ["NOTIFY_SOCKET"],
           "WATCHDOG_USEC": "2000000"}
    agent = subprocess.Popen([NODEAGENT, "run", "--config", str(config), "--root", str(root)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        messages: list[tuple[float, str]] = []

        def heard_enough() -> bool:
            """Up to registering, which finds the coordinator away, then a few more pings."""
            messages.append((time.monotonic(), listener.recv(4096).decode()))
            return (any(m.startswith("STATUS=coordinator unreachable") for _, m in messages)
                    and sum(m == "WATCHDOG=1" for _, m in messages) >= 4)

        wait_until(heard_enough, 30, lambda: f"an unreachable status and 4 pings in {messages}",
                   interval=0)
    finally:
        agent.terminate()
        _, stderr = agent.communicate(timeout=10)
    texts = [m for _, m in messages]
    assert texts[0] == "READY=1", (texts, stderr)
    assert any(m.startswith("STATUS=coordinator unreachable") for m in texts), texts
    pings = [at for at, m in messages if m == "WATCHDOG=1"]
    assert len(pings) >= 4, (texts, stderr)
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 2.0, f"systemd would have killed the agent: pings {gaps} s apart"
