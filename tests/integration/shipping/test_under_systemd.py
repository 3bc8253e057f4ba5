"""The .debs in the Debian root booted with systemd as PID 1 (systemd-nspawn): what the
post-install and removal scripts and the units do under a real service manager."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.support.nspawn import Container
from tests.support.packages import Packages
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def install(box: Container, root: Path, deb: Path) -> str:
    """dpkg -i inside the container (its /tmp is its own tmpfs: the file goes to /var/tmp)."""
    shutil.copy(deb, root / "var/tmp" / deb.name)
    return box.ok("dpkg", "-i", f"/var/tmp/{deb.name}")


def test_the_agent_starts_once_configured_pets_the_watchdog_and_stops_on_removal(
    packages: Packages, node_root: Path, box: Container
) -> None:
    deb = packages.deb["nodeagent"]
    out = install(box, node_root, deb)
    assert "enabled but not started" in out and "not configured yet" in out, out
    assert box.ok("systemctl", "is-enabled", "nodeagent").strip() == "enabled"
    assert box.active("nodeagent") == "inactive"

    # Configured (its coordinator does not answer: it keeps trying), and a 2 s watchdog so
    # that a missed ping would get it killed within the test.
    (node_root / "etc/nodeagent/config.yaml").write_text(
        "coordinator: {url: 'http://127.0.0.1:9'}\njoinToken: join_x\n")
    dropin = node_root / "etc/systemd/system/nodeagent.service.d/watchdog.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nWatchdogSec=2s\n")
    install(box, node_root, deb)  # a reinstall runs the post-install script again
    wait_until(lambda: box.unit("nodeagent", "StatusText")["StatusText"].startswith(
        "coordinator unreachable"),
               30, "the agent's status under systemd")
    first = box.unit("nodeagent", "MainPID", "WatchdogTimestampMonotonic")
    time.sleep(5)
    later = box.unit("nodeagent", "Type", "MainPID", "NRestarts", "WatchdogTimestampMonotonic",
                     "WatchdogUSec")
    assert box.active("nodeagent") == "active"
    assert later["Type"] == "notify" and later["WatchdogUSec"] == "2s"
    assert later["MainPID"] == first["MainPID"] and later["NRestarts"] == "0"
    assert int(later["WatchdogTimestampMonotonic"]) > int(first["WatchdogTimestampMonotonic"])
    journal = box.ok("journalctl", "-u", "nodeagent", "-o", "cat", "--no-pager")
    assert "register: coordinator http://127.0.0.1:9 unreachable" in journal

    box.ok("dpkg", "--remove", "nodeagent")
    assert box.active("nodeagent") == "inactive"
    assert box.unit("nodeagent", "MainPID")["MainPID"] == "0"


def test_the_hardened_coordinator_serves_as_its_own_user_and_restarts_on_upgrade(
    packages: Packages, node_root: Path, box: Container
) -> None:
    deb = packages.deb["coordinator"]
    out = install(box, node_root, deb)
    assert "not started: no CA yet: run coordinator init" in out, out
    env = node_root / "etc/coordinator/coordinator.env"
    env.write_text(env.read_text().replace("--listen 0.0.0.0:8080", "--listen 127.0.0.1:8080"))
    box.ok("coordinator", "init", "--data-dir", "/var/lib/coordinator", "--name", "127.0.0.1",
           "--listen", "127.0.0.1:8080")
    box.ok("systemctl", "start", "coordinator")
    admin = ["coordinator", "--url", "https://127.0.0.1:8080", "--ca",
             "/var/lib/coordinator/pki/ca.crt", "--token-file", "/var/lib/coordinator/admin.token"]
    wait_until(lambda: box.run([*admin, "cluster", "get"]).returncode == 0,
               30, "the coordinator under its sandbox", interval=0.3)
    before = box.unit("coordinator", "MainPID", "User")
    assert before["User"] == "coordinator"
    uid_line = box.ok("grep", "^Uid:", f"/proc/{before['MainPID']}/status").split()
    passwd = box.ok("getent", "passwd", "coordinator").split(":")
    assert uid_line[1] == passwd[2] != "0", uid_line

    install(box, node_root, deb)  # upgrade path: kept env file, service restarted
    assert "127.0.0.1:8080" in env.read_text()
    wait_until(lambda: box.run([*admin, "cluster", "get"]).returncode == 0,
               30, "the coordinator after the upgrade", interval=0.3)
    assert box.unit("coordinator", "MainPID")["MainPID"] != before["MainPID"]
