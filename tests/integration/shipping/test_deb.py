"""The .debs installed with dpkg into a minimal Debian root without python3, as on a fresh
node; the agent runs there from its own bundle. Then an upgrade, a removal and a purge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nodeagent.wire import joinstring
from tests.support.packages import Packages, build_packages, in_root

pytestmark = pytest.mark.integration
CONFIG = "etc/nodeagent/config.yaml"
ENABLED = "etc/systemd/system/multi-user.target.wants/nodeagent.service"


def dpkg(root: Path, *args: str, deb: Path | None = None) -> str:
    argv = ["dpkg", *args]
    if deb is not None:
        shutil.copy(deb, root / "tmp" / deb.name)
        argv.append(f"/tmp/{deb.name}")
    result = in_root(root, argv)
    assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def test_the_agent_runs_its_prechecks_on_a_node_without_python(
    packages: Packages, node_root: Path
) -> None:
    assert in_root(node_root, ["sh", "-c", "command -v python3 || command -v python"]
                   ).returncode != 0, "the minimal root should have no Python"
    out = dpkg(node_root, "-i", deb=packages.deb["nodeagent"])
    assert "nodeagent.service is enabled" in out and "systemd is not running" in out, out
    assert (node_root / ENABLED).is_symlink()

    result = in_root(node_root, ["nodeagent", "precheck", "--output", "json"])
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["os"]["status"] == "pass" and checks["os"]["data"]["id"] == "debian"
    assert checks["coordinator"]["status"] == "skip"  # the shipped config names none yet

    ready = in_root(node_root, ["nodeagent", "check-config"])
    assert ready.returncode == 1 and "not configured yet" in ready.stdout


def test_the_coordinator_gets_its_own_user_and_runs_without_python(
    packages: Packages, node_root: Path
) -> None:
    dpkg(node_root, "-i", deb=packages.deb["coordinator"])
    user = in_root(node_root, ["getent", "passwd", "coordinator"])
    assert user.returncode == 0 and user.stdout.split(":")[6].strip() == "/usr/sbin/nologin"
    version = in_root(node_root, ["coordinator", "version"])
    assert version.stdout.strip() == packages.version, version.stderr
    # The SSH stack (asyncssh, cryptography) is in the bundle: it gets as far as reading the key.
    (node_root / "root/known_hosts").touch()
    join = joinstring.make("http://127.0.0.1:1", "join_x", None)
    ssh = in_root(node_root, ["coordinator", "machines", "add", "--ssh", "root@127.0.0.1:1",
                              "--key", "/etc/hostname", "--known-hosts", "/root/known_hosts",
                              "--join", join, "--packages", "/tmp"])
    assert ssh.returncode == 1 and "--key /etc/hostname: not a usable private key" in ssh.stderr, \
        ssh.stderr


def test_an_upgrade_keeps_the_edited_config_and_purge_removes_the_state(
    packages: Packages, node_root: Path, tmp_path: Path
) -> None:
    dpkg(node_root, "-i", deb=packages.deb["nodeagent"])
    edited = ("coordinator: {url: 'http://coordinator.test:8080'}\n"
              "joinToken: join_edited\n")
    (node_root / CONFIG).write_text(edited)
    identity = node_root / "var/lib/nodeagent/identity.json"
    identity.parent.mkdir(parents=True, exist_ok=True)
    identity.write_text('{"machine_id": "m", "credential": "c"}')

    newer = build_packages(tmp_path / "dist", version=f"{packages.version}+2", reuse_bundles=True)
    dpkg(node_root, "-i", deb=newer.deb["nodeagent"])
    status = in_root(node_root, ["dpkg-query", "-W", "-f", "${Version}", "nodeagent"])
    assert status.stdout == newer.version
    assert (node_root / CONFIG).read_text() == edited
    assert identity.exists()
    assert in_root(node_root, ["nodeagent", "check-config"]).returncode == 0

    dpkg(node_root, "--remove", "nodeagent")
    assert not (node_root / "opt/nodeagent").exists()
    assert (node_root / CONFIG).read_text() == edited  # removal keeps conffiles and state
    assert identity.exists()

    dpkg(node_root, "--purge", "nodeagent")
    assert not (node_root / CONFIG).exists()
    assert not (node_root / "var/lib/nodeagent").exists()
    assert not (node_root / ENABLED).exists()
