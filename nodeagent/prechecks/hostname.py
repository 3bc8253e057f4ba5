"""Kubernetes node names are RFC 1123 subdomains; a mismatched /etc/hostname renames the node on reboot."""

from __future__ import annotations

import re

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def problems(name: str) -> list[str]:
    found = []
    if not name:
        return ["it is empty"]
    if name != name.lower():
        found.append("it has uppercase letters")
    if len(name) > 253:
        found.append(f"it is {len(name)} characters long (at most 253)")
    if name.split(".")[0].lower() == "localhost":
        found.append("it is localhost")
    for label in name.lower().split("."):
        if len(label) > 63:
            found.append(f"label {label[:20]}... is {len(label)} characters long (at most 63)")
        elif not _LABEL.match(label):
            found.append(
                f"label {label!r} must be letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
    return found


def evaluate(kernel_name: str, etc_hostname: str | None) -> Outcome:
    data = {"hostname": kernel_name, "etc_hostname": etc_hostname}
    found = problems(kernel_name)
    if found:
        return failed(
            f"hostname {kernel_name!r} is not a valid node name: {'; '.join(found)}",
            "set an RFC 1123 name: `hostnamectl set-hostname node-1.example` (lowercase "
            "letters, digits, '-' and '.')",
            **data,
        )
    if etc_hostname is not None and etc_hostname != kernel_name:
        return failed(
            f"hostname {kernel_name!r} differs from /etc/hostname ({etc_hostname!r}); "
            "the node would be renamed on reboot",
            f"make them agree: `hostnamectl set-hostname {kernel_name}`",
            **data,
        )
    return passed(f"hostname {kernel_name!r} is a valid node name", **data)


async def run(ctx: CheckContext) -> Outcome:
    text = ctx.host.read_text("/etc/hostname")
    etc_name = text.strip() if text is not None and text.strip() else None
    return evaluate(ctx.host.kernel_hostname(), etc_name)
