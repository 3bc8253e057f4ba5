"""Supported operating systems, and the os-release parser (shared with facts)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed


@dataclass(frozen=True)
class Distribution:
    """A supported operating system: its os-release ID, its name as the README's support
    matrix spells it, and its major versions; `since`: every release from that major on (a
    distribution that releases twice a year, e.g. Fedora)."""

    id: str
    name: str
    versions: tuple[str, ...] = ()
    since: int | None = None

    def supports(self, version_id: str) -> bool:
        # RHEL-likes report minor versions (9.4); Ubuntu's support is per point release.
        major = version_id if self.id == "ubuntu" else version_id.split(".")[0]
        if self.since is not None:
            return major.isdigit() and int(major) >= self.since
        return major in self.versions

    @property
    def releases(self) -> str:
        return f"{self.since} and later" if self.since is not None else ", ".join(self.versions)


# The one support matrix (README.md's table says the same; a test compares them). The 8
# family is not on it: its 4.18 kernel is below what kubeadm validates (kernel-version).
SUPPORTED: tuple[Distribution, ...] = (
    Distribution("debian", "Debian", ("12",)),
    Distribution("ubuntu", "Ubuntu", ("22.04", "24.04")),
    Distribution("rhel", "Red Hat Enterprise Linux", ("9",)),
    Distribution("rocky", "Rocky Linux", ("9",)),
    Distribution("almalinux", "AlmaLinux", ("9",)),
    Distribution("centos", "CentOS Stream", ("9",)),
    Distribution("fedora", "Fedora", since=42),
)
_BY_ID = {d.id: d for d in SUPPORTED}


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines with shell quoting, as os-release(5) specifies."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        fields[key.strip()] = parts[0] if parts else ""
    return fields


def read_os_release(host: Host) -> dict[str, str] | None:
    text = host.read_text("/etc/os-release") or host.read_text("/usr/lib/os-release")
    return parse_os_release(text) if text is not None else None


def evaluate(fields: dict[str, str] | None) -> Outcome:
    supported = "; ".join(f"{d.name} {d.releases}" for d in SUPPORTED)
    remedy = f"install a supported operating system: {supported}"
    if fields is None:
        return failed("no /etc/os-release or /usr/lib/os-release", remedy)
    os_id = fields.get("ID", "").lower()
    version = fields.get("VERSION_ID", "")
    name = fields.get("PRETTY_NAME") or f"{os_id} {version}".strip()
    data = {"id": os_id, "version_id": version, "pretty_name": name}
    distribution = _BY_ID.get(os_id)
    if distribution is None:
        return failed(f"{name} is not a supported operating system", remedy, **data)
    if not distribution.supports(version):
        return failed(
            f"{name}: version {version or '(none)'} is not supported "
            f"(supported: {distribution.name} {distribution.releases})",
            remedy,
            **data,
        )
    return passed(f"{name} is supported", **data)


async def run(ctx: CheckContext) -> Outcome:
    return evaluate(read_os_release(ctx.host))
