"""What `machines add` decides from a host's probe output, and the configs it writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from coordinator.ssh.install import (
    BootstrapError,
    agent_config,
    install_argv,
    profile,
    retargeted_config,
)
from coordinator.ssh.session import SshTarget, find_package
from nodeagent.wire import joinstring
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.validation import load_model

JOIN = joinstring.make("http://coordinator.test:8080", "join_x", None)


def probe(os_release: str, machine: str = "x86_64", systemd: bool = True, uid: int = 0) -> str:
    return (f"{os_release}\n@@machine={machine}\n@@systemd={'yes' if systemd else 'no'}\n"
            f"@@uid={uid}\n")


@pytest.mark.parametrize(("os_release", "package_format"), [
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian', "deb"),
    ('PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\nID_LIKE=debian', "deb"),
    ('PRETTY_NAME="Linux Mint 21"\nID=linuxmint\nID_LIKE="ubuntu debian"', "deb"),
    ('PRETTY_NAME="Rocky Linux 9.3"\nID="rocky"\nID_LIKE="rhel centos fedora"', "rpm"),
    ('PRETTY_NAME="Fedora Linux 40"\nID=fedora', "rpm"),
    ('PRETTY_NAME="openSUSE Leap 15.5"\nID="opensuse-leap"\nID_LIKE="suse opensuse"', "rpm"),
])
def test_the_os_family_picks_the_package_format(os_release: str, package_format: str) -> None:
    assert profile(probe(os_release)).package_format == package_format


def test_the_probe_tells_systemd_and_whether_sudo_is_needed() -> None:
    host = profile(probe("ID=debian", machine="aarch64", systemd=False, uid=1000))
    assert (host.machine, host.systemd, host.root) == ("aarch64", False, False)
    assert install_argv(host, "/tmp/x/a.deb")[:2] == ["sudo", "-n"]
    root = profile(probe("ID=rocky\nID_LIKE=rhel"))
    assert install_argv(root, "/tmp/a.rpm") == ["rpm", "-U", "--replacepkgs", "/tmp/a.rpm"]


@pytest.mark.parametrize(("text", "message"), [
    (probe('PRETTY_NAME="Alpine Linux v3.19"\nID=alpine'), "Alpine Linux v3.19 (ID=alpine) is "
     "neither Debian- nor RHEL-like"),
    (probe("ID=debian", machine="riscv64"), "no agent package for the riscv64 architecture"),
    ("sh: cat: not found\n", "an unknown OS"),
])
def test_a_host_without_a_package_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(BootstrapError, match=re.escape(message)):
        profile(text)


def test_the_package_matching_format_and_architecture_is_picked(tmp_path: Path) -> None:
    for name in ("nodeagent_0.1.0_amd64.deb", "nodeagent_0.1.0_arm64.deb",
                 "nodeagent-0.1.0-1.x86_64.rpm", "coordinator_0.1.0_amd64.deb"):
        (tmp_path / name).touch()
    debian_arm = profile(probe("ID=debian", machine="aarch64"))
    assert find_package(tmp_path, debian_arm).name == "nodeagent_0.1.0_arm64.deb"
    rocky = profile(probe("ID=rocky\nID_LIKE=rhel"))
    assert find_package(tmp_path, rocky).name == "nodeagent-0.1.0-1.x86_64.rpm"
    (tmp_path / "nodeagent-0.2.0-1.x86_64.rpm").touch()
    with pytest.raises(BootstrapError, match=r"2 nodeagent-\*.x86_64.rpm in .*need exactly one"):
        find_package(tmp_path, rocky)
    with pytest.raises(BootstrapError, match=r"no nodeagent-.*aarch64.rpm"):
        find_package(tmp_path, profile(probe("ID=fedora", machine="aarch64")))


def test_the_written_config_is_one_the_agent_accepts() -> None:
    text = agent_config(JOIN, "manager", "written by a test")
    config = load_model(AgentConfig, text, "config.yaml")
    assert (config.coordinator.url, config.join_token, config.role) == (
        "http://coordinator.test:8080", "join_x", "manager")
    assert text.startswith("# written by a test\n")


def test_retargeting_changes_only_the_coordinator_url() -> None:
    before = f"join: {JOIN}\nrole: worker\nntp: {{servers: [ntp.test]}}\n"
    after = retargeted_config(before, "http://new.test:9090")
    config = load_model(AgentConfig, after, "config.yaml")
    assert config.coordinator.url == "http://new.test:9090"
    data = yaml.safe_load(after)
    assert {k: v for k, v in data.items() if k != "coordinator"} == yaml.safe_load(before)


def test_an_invalid_config_on_the_host_is_left_alone() -> None:
    with pytest.raises(BootstrapError, match=r"(?s)invalid, not changed:.*heartbeatSeconds"):
        retargeted_config("heartbeatSeconds: -1\n", "http://new.test:9090")


@pytest.mark.parametrize(("text", "expected"), [
    ("root@node1", SshTarget("root", "node1", 22)),
    ("admin@10.0.0.5:2222", SshTarget("admin", "10.0.0.5", 2222)),
    ("root@[fd00::5]:22", SshTarget("root", "fd00::5", 22)),
])
def test_ssh_targets_parse(text: str, expected: SshTarget) -> None:
    assert SshTarget.parse(text) == expected
    assert SshTarget.parse(str(expected)) == expected


@pytest.mark.parametrize("text", ["node1", "root@", "root@node:0", "root@node:99999",
                                  "root@fd00::5"])
def test_bad_ssh_targets_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected user@host|port must be"):
        SshTarget.parse(text)
