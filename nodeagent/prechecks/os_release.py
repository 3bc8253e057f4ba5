"""Supported operating systems, and the os-release parser (shared with facts)."""

from __future__ import annotations

import shlex

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

# The one place that says which systems a node may run: family -> supported major versions.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "ubuntu": ("20.04", "22.04", "24.04"),
    "debian": ("11", "12"),
    "rhel": ("8", "9"),
    "rocky": ("8", "9"),
    "almalinux": ("8", "9"),
}


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
    supported = "; ".join(f"{k} {', '.join(v)}" for k, v in SUPPORTED.items())
    remedy = f"install a supported operating system: {supported}"
    if fields is None:
        return failed("no /etc/os-release or /usr/lib/os-release", remedy)
    os_id = fields.get("ID", "").lower()
    version = fields.get("VERSION_ID", "")
    name = fields.get("PRETTY_NAME") or f"{os_id} {version}".strip()
    data = {"id": os_id, "version_id": version, "pretty_name": name}
    if os_id not in SUPPORTED:
        return failed(f"{name} is not a supported operating system", remedy, **data)
    allowed = SUPPORTED[os_id]
    # RHEL-likes report minor versions (9.3); Ubuntu's support is per point release.
    major = version if os_id == "ubuntu" else version.split(".")[0]
    if major not in allowed:
        return failed(
            f"{name}: version {version or '(none)'} is not supported "
            f"(supported: {', '.join(allowed)})",
            remedy,
            **data,
        )
    return passed(f"{name} is supported", **data)


async def run(ctx: CheckContext) -> Outcome:
    return evaluate(read_os_release(ctx.host))
