"""`coordinator machines add --ssh` and `coordinator agents retarget` against real OpenSSH
sshds: one whose logins are chrooted into a minimal Debian root (no systemd running), and
the root booted with systemd running its own sshd. The package is copied, installed with
dpkg and configured there, the installed agent joins the coordinator, then moves to another
one. A host key that does not match is refused before anything is sent."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.wire.config import load_config
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.nspawn import Container
from tests.support.packages import Packages, in_root, in_root_argv, overlay
from tests.support.sshd import Sshd, keypair, sshd
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
SPEC = 'name: lab\nrelease: "1"\nmachineTypes:\n  worker: []\n'
CONFIG = "etc/nodeagent/config.yaml"


@pytest.fixture
def host_root(debian_root: Path, tmp_path: Path) -> Iterator[Path]:
    """The SSH host's filesystem: an overlay of the Debian root mounted under /run, where
    every directory above it is root-owned and private, as sshd's ChrootDirectory demands."""
    mountpoint = Path(tempfile.mkdtemp(prefix="nodeagent-host-", dir="/run"))
    try:
        with overlay(debian_root, tmp_path / "host", mountpoint) as root:
            yield root
    finally:
        shutil.rmtree(mountpoint, ignore_errors=True)


@pytest.fixture
def host(tmp_path: Path, host_root: Path) -> Iterator[Sshd]:
    with sshd(tmp_path / "sshd", host_root) as server:
        yield server


@contextlib.contextmanager
def running_agent(root: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`nodeagent run` in the host root, started by hand: the root has no systemd."""
    with log.open("ab") as out:
        agent = subprocess.Popen(in_root_argv(root, ["nodeagent", "run"]),
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        yield agent
    finally:
        agent.kill()  # unshare's --kill-child takes the agent along
        agent.wait(timeout=10)


def add(c: ServedCoordinator, host: Sshd, packages: Packages, *trust: str
        ) -> subprocess.CompletedProcess[str]:
    trust = trust or ("--known-hosts", str(host.known_hosts))
    return c.cli("machines", "add", "--ssh", host.target, "--key", str(host.client_key), *trust,
                 "--cluster", "lab", "--role", "worker",
                 "--packages", str(packages.deb["nodeagent"].parent), ok=False, timeout=120)


def machines_seen_after(c: ServedCoordinator, since: float) -> list[str]:
    return [m["hostname"] for m in c.cli_json("machines") if (m["last_seen"] or 0) > since]


def test_machines_add_installs_the_agent_which_joins_then_retargets(
    packages: Packages, host: Sshd, host_root: Path, tmp_path: Path
) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    with running_coordinator(tmp_path / "first", cluster=None) as first:
        first.cli("cluster", "apply", "-f", str(tmp_path / "spec.yaml"))
        result = add(first, host, packages)
        assert result.returncode == 0, result.stderr + result.stdout
        out = result.stdout
        assert "Debian GNU/Linux" in out and "installs .deb" in out, out
        assert f"copied {packages.deb['nodeagent'].name}" in out
        assert "has no systemd" in out and "NOT running" in out  # said clearly

        installed = in_root(host_root, ["dpkg-query", "-W", "-f", "${Status} ${Version}",
                                        "nodeagent"])
        assert installed.stdout == f"install ok installed {packages.version}"
        config = load_config(str(host_root / CONFIG))
        assert config.join and config.coordinator.url == first.url
        assert config.role == "worker"
        assert (host_root / CONFIG).stat().st_mode & 0o777 == 0o640

        with running_agent(host_root, tmp_path / "agent.log"):
            wait_until(lambda: len(first.cli_json("machines")) == 1,
                       60, "the installed agent's registration", interval=0.5)
    # The pivot: a second coordinator takes over the first one's data; agents move to it.
    shutil.copytree(tmp_path / "first", tmp_path / "second")
    with running_coordinator(tmp_path / "second", cluster=None) as second:
        moved = second.cli("agents", "retarget", "--url", second.url, "--ssh", host.target,
                           "--key", str(host.client_key), "--host-key", host.host_key,
                           ok=False, timeout=120)
        assert moved.returncode == 0, moved.stderr + moved.stdout
        assert f"coordinator.url is now {second.url}" in moved.stdout
        config = load_config(str(host_root / CONFIG))
        assert config.coordinator.url == second.url
        assert config.join  # everything else kept
        since = time.time()
        with running_agent(host_root, tmp_path / "agent.log"):  # what systemd's restart does
            wait_until(lambda: machines_seen_after(second, since),
                       60, "the agent's heartbeat at the second coordinator", interval=0.5)


def test_a_wrong_host_key_is_refused_before_anything_is_sent(
    packages: Packages, host: Sshd, host_root: Path, tmp_path: Path
) -> None:
    impostor = keypair(tmp_path / "other_host_key")
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{host.port} {impostor}\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    with running_coordinator(tmp_path, cluster=None) as c:
        c.cli("cluster", "apply", "-f", str(tmp_path / "spec.yaml"))
        for trust in (("--known-hosts", str(wrong)), ("--host-key", impostor),
                      ("--known-hosts", str(tmp_path / "missing"))):
            result = add(c, host, packages, *trust)
            assert result.returncode == 1, result.stdout
            assert "REFUSED" in result.stderr or "never accepted unchecked" in result.stderr, \
                result.stderr
            assert "Traceback" not in result.stderr
    assert in_root(host_root, ["dpkg-query", "-W", "nodeagent"]).returncode != 0
    assert not (host_root / CONFIG).exists()
    assert not list((host_root / "tmp").glob("nodeagent.*"))


def test_on_a_host_whose_systemd_runs_the_agent_is_started_and_restarted_by_it(
    packages: Packages, node_root: Path, box: Container, tmp_path: Path
) -> None:
    """The booted root as the host: Debian's sshd run by its systemd; the coordinators run in
    the host's network namespace, where only loopback exists."""
    client_pub = keypair(tmp_path / "client_key")
    ssh_dir = node_root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(client_pub + "\n")
    host_key = " ".join((node_root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])
    wait_until(lambda: box.active("ssh") == "active", 30, "the host's sshd")
    in_host_net = ["nsenter", f"--net=/proc/{box.init_pid}/ns/net"]
    ssh = ("--ssh", "root@127.0.0.1", "--key", str(tmp_path / "client_key"),
           "--host-key", host_key)
    (tmp_path / "spec.yaml").write_text(SPEC)
    with running_coordinator(tmp_path / "first", cluster=None, prefix=in_host_net) as first:
        first.cli("cluster", "apply", "-f", str(tmp_path / "spec.yaml"))
        result = first.cli("machines", "add", *ssh, "--cluster", "lab",
                           "--packages", str(packages.deb["nodeagent"].parent),
                           ok=False, timeout=120)
        assert result.returncode == 0, result.stderr + result.stdout
        assert "systemd running" in result.stdout
        assert "nodeagent.service enabled and running" in result.stdout
        assert box.active("nodeagent") == "active"
        wait_until(lambda: len(first.cli_json("machines")) == 1,
                   60, "the registration of the agent systemd started", interval=0.5)
        started = box.unit("nodeagent", "MainPID")["MainPID"]
    shutil.copytree(tmp_path / "first", tmp_path / "second")
    with running_coordinator(tmp_path / "second", cluster=None, prefix=in_host_net) as second:
        moved = second.cli("agents", "retarget", "--url", second.url, *ssh, ok=False,
                           timeout=120)
        assert moved.returncode == 0, moved.stderr + moved.stdout
        assert "nodeagent.service enabled and running" in moved.stdout
        assert box.unit("nodeagent", "MainPID")["MainPID"] != started  # restarted by systemd
        since = time.time()
        wait_until(lambda: machines_seen_after(second, since),
                   60, "the agent's heartbeat at the second coordinator", interval=0.5)
