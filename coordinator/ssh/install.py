"""What pushing an agent onto a host means, decided from what the host said about itself:
which package it takes, how it is installed, what config it gets. Pure: coordinator/ssh/session.py
does the talking and looks for the package file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import yaml

from nodeagent.wire.config import AgentConfig
from nodeagent.wire.contract import Role
from nodeagent.wire.validation import InvalidDocument, load_model

PackageFormat = Literal["deb", "rpm"]
DEB_FAMILY = frozenset({"debian", "ubuntu"})
RPM_FAMILY = frozenset({"rhel", "fedora", "centos", "rocky", "almalinux", "ol", "suse",
                        "opensuse", "sles", "amzn"})
# uname -m -> (Debian architecture, RPM architecture)
ARCHITECTURES = {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "aarch64")}
AGENT_CONFIG = "/etc/nodeagent/config.yaml"

# One round trip tells all: os-release, machine, whether systemd is PID 1 (sd_booted's test).
PROBE = ('cat /etc/os-release; echo "@@machine=$(uname -m)"; '
         'if [ -d /run/systemd/system ]; then echo @@systemd=yes; else echo @@systemd=no; fi; '
         'echo "@@uid=$(id -u)"')


class BootstrapError(Exception):
    """The host cannot take the agent; the message says why and what to do."""


@dataclass(frozen=True)
class HostProfile:
    os_id: str
    pretty_name: str
    package_format: PackageFormat
    machine: str
    systemd: bool
    root: bool

    @property
    def sudo(self) -> list[str]:
        return [] if self.root else ["sudo", "-n"]


def profile(probe_output: str) -> HostProfile:
    """Read PROBE's output. Raises BootstrapError for an OS or machine there is no package for."""
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', probe_output, re.M))
    marks = dict(re.findall(r"^@@(\w+)=(.*)$", probe_output, re.M))
    os_id = fields.get("ID", "")
    family = {os_id, *fields.get("ID_LIKE", "").split()}
    pretty = fields.get("PRETTY_NAME", os_id or "an unknown OS")
    if family & DEB_FAMILY:
        package_format: PackageFormat = "deb"
    elif family & RPM_FAMILY:
        package_format = "rpm"
    else:
        raise BootstrapError(f"{pretty} (ID={os_id or '?'}) is neither Debian- nor RHEL-like: "
                             "there is no agent package for it")
    machine = marks.get("machine", "")
    if machine not in ARCHITECTURES:
        raise BootstrapError(f"no agent package for the {machine or 'unknown'} architecture")
    return HostProfile(os_id, pretty, package_format, machine, marks.get("systemd") == "yes",
                       marks.get("uid") == "0")


def package_pattern(host: HostProfile) -> str:
    """The file name pattern of the nodeagent package that fits the host."""
    deb_arch, rpm_arch = ARCHITECTURES[host.machine]
    return (f"nodeagent_*_{deb_arch}.deb" if host.package_format == "deb"
            else f"nodeagent-*.{rpm_arch}.rpm")


def install_argv(host: HostProfile, package: str) -> list[str]:
    """Install or upgrade; an operator's edits of the config file are kept either way."""
    if host.package_format == "deb":
        return [*host.sudo, "dpkg", "--force-confdef", "--force-confold", "-i", package]
    return [*host.sudo, "rpm", "-U", "--replacepkgs", package]


def agent_config(join_string: str, role: Role | None, comment: str) -> str:
    """The config file `machines add` writes; validated as the agent would read it."""
    data: dict[str, str] = {"join": join_string}
    if role:
        data["role"] = role
    text = f"# {comment}\n" + yaml.safe_dump(data, sort_keys=False)
    load_model(AgentConfig, text, AGENT_CONFIG)
    return text


def retargeted_config(text: str, url: str) -> str:
    """The agent's config with coordinator.url set to url, other keys as they were.
    Raises BootstrapError when the host's config is not one the agent would accept."""
    try:
        load_model(AgentConfig, text, AGENT_CONFIG)
        data = yaml.safe_load(text) or {}
        data.setdefault("coordinator", {})["url"] = url
        result = "# coordinator.url set by `coordinator agents retarget`\n" + yaml.safe_dump(
            data, sort_keys=False)
        load_model(AgentConfig, result, AGENT_CONFIG)
    except InvalidDocument as exc:
        raise BootstrapError(f"the agent's config is invalid, not changed:\n{exc}") from None
    return result


def service_argv(host: HostProfile, action: str) -> list[str]:
    return [*host.sudo, "systemctl", action, "nodeagent.service"]
