"""`options rotate` in resolv.conf makes CoreDNS forwarding and node lookups flap between servers."""

from __future__ import annotations

import dns.resolver

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, warned

PATH = "/etc/resolv.conf"


def evaluate(resolver: dns.resolver.Resolver | None) -> Outcome:
    if resolver is None:
        return warned(f"{PATH} is missing or unreadable", f"create {PATH} with your nameservers")
    data = {"nameservers": [str(n) for n in resolver.nameservers], "rotate": resolver.rotate}
    if resolver.rotate:
        return failed(
            f"{PATH} sets `options rotate`",
            f"remove `rotate` from the options line of {PATH} (or from the DHCP/netplan "
            "settings that write it)",
            **data,
        )
    return passed(f"{PATH} does not rotate nameservers", **data)


def parse(path: str) -> dns.resolver.Resolver | None:
    try:
        return dns.resolver.Resolver(filename=path, configure=True)
    except (OSError, dns.resolver.NoResolverConfiguration):
        return None


async def run(ctx: CheckContext) -> Outcome:
    return evaluate(parse(str(ctx.host.path(PATH))))
