"""Port 53 must be free: the cluster DNS (and node-local DNS caches) bind it."""

from __future__ import annotations

from nodeagent.host import Listener, ProcessInfo
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

DNS_PORT = 53
UNKNOWN = "unknown"
RESOLVED = "systemd-resolved"


def holders(listeners: list[Listener], processes: list[ProcessInfo], port: int) -> list[dict]:
    """Who binds port, per protocol, with the process name where the kernel tells."""
    names = {p.pid: p.name for p in processes}
    seen = set()
    found = []
    for sock in listeners:
        if sock.port != port:
            continue
        key = (sock.protocol, sock.address, sock.pid)
        if key in seen:
            continue
        seen.add(key)
        found.append(
            {
                "protocol": sock.protocol,
                "address": sock.address,
                "pid": sock.pid,
                "process": names.get(sock.pid, UNKNOWN) if sock.pid else UNKNOWN,
            }
        )
    return sorted(found, key=lambda h: (h["protocol"], h["address"]))


def evaluate(taken: list[dict]) -> Outcome:
    if not taken:
        return passed("port 53 is free on TCP and UDP")
    described = ", ".join(
        f"{h['protocol'].upper()} {h['address']}:{DNS_PORT} by "
        + ("an unknown process" if h["process"] == UNKNOWN else h["process"])
        + (f" (pid {h['pid']})" if h["pid"] else "")
        for h in taken
    )
    named = sorted({h["process"] for h in taken if h["process"] != UNKNOWN})
    remedies = []
    if named:
        remedies.append(f"stop and disable {', '.join(named)}")
    if RESOLVED in named:
        remedies.append(
            "for systemd-resolved, turn off its stub listener instead: DNSStubListener=no "
            "in /etc/systemd/resolved.conf and restart it"
        )
    if any(h["process"] == UNKNOWN for h in taken):
        remedies.append(f"find the unnamed holder with `ss -lntup 'sport = :{DNS_PORT}'` and stop it")
    return failed(f"port 53 is in use: {described}", "; ".join(remedies), holders=taken)


async def run(ctx: CheckContext) -> Outcome:
    listeners = await ctx.listeners()
    processes = await ctx.processes()
    return evaluate(holders(listeners, processes, DNS_PORT))
