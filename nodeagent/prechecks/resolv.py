"""`options rotate` in resolv.conf makes CoreDNS forwarding and node lookups flap between servers.

Parsed here rather than by dnspython, whose parser raises the same error for a missing
file and for a file without nameserver lines, dropping the rotate option it had read.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, warned

PATH = "/etc/resolv.conf"


@dataclass(frozen=True)
class ResolvConf:
    nameservers: list[str]
    rotate: bool


def parse(text: str) -> ResolvConf:
    """Nameservers and the rotate option as the kubelet reads them for pods: `#` and `;`
    start comments, and every `options` line counts."""
    nameservers: list[str] = []
    rotate = False
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            nameservers.append(fields[1])
        elif fields[:1] == ["options"] and "rotate" in fields[1:]:
            rotate = True
    return ResolvConf(nameservers, rotate)


def evaluate(conf: ResolvConf | None) -> Outcome:
    if conf is None:
        return warned(f"{PATH} is missing or unreadable", f"create {PATH} with your nameservers")
    data = {"nameservers": conf.nameservers, "rotate": conf.rotate}
    if conf.rotate:
        return failed(
            f"{PATH} sets `options rotate`",
            f"remove `rotate` from the options line of {PATH} (or from the DHCP/netplan "
            "settings that write it)",
            **data,
        )
    if not conf.nameservers:
        return warned(
            f"{PATH} lists no nameserver, so lookups go to 127.0.0.1",
            f"add `nameserver` lines for your DNS servers to {PATH}",
            **data,
        )
    return passed(f"{PATH} does not rotate nameservers", **data)


async def run(ctx: CheckContext) -> Outcome:
    text = ctx.host.read_text(PATH)
    return evaluate(parse(text) if text is not None else None)
