"""`options rotate` in resolv.conf makes CoreDNS forwarding and node lookups flap between servers.

Read with dnspython's parser, fed the text through the Host seam: its "no nameservers"
and bad-address errors come after it has read the options, so rotate is still known.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import dns.resolver

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, warned

PATH = "/etc/resolv.conf"


@dataclass(frozen=True)
class ResolvConf:
    nameservers: list[str]
    rotate: bool
    problem: str = ""


def parse(text: str) -> ResolvConf:
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = []
    try:
        resolver.read_resolv_conf(io.StringIO(text))
    except dns.resolver.NoResolverConfiguration:
        pass  # no nameserver line: reported by evaluate
    except ValueError as exc:  # a nameserver line that is not an address
        return ResolvConf([], resolver.rotate, f"has a bad nameserver line ({exc})")
    return ResolvConf([str(n) for n in resolver.nameservers], resolver.rotate)


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
    if conf.problem:
        return warned(f"{PATH} {conf.problem}", f"fix the nameserver lines of {PATH}", **data)
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
