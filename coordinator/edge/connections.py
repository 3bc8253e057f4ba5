"""Which connections the coordinator takes: a bound on those open from one client, and on all
of them together (the process's descriptor limit less a reserve for its store, its PKI files
and its logs), so that one client holding connections open cannot deny the others service.
Counting only, no I/O: the listener (coordinator/server/listener.py) asks and tells."""

from __future__ import annotations

import ipaddress
from collections import Counter

# An IPv6 client usually holds a whole /64: its addresses count as one client.
IPV6_CLIENT_PREFIX = 64


def client_of(address: str) -> str:
    """The client a peer address counts as: itself for IPv4 (an IPv4-mapped IPv6 address as
    its IPv4), its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)


class ConnectionCounts:
    """Open connections by client. `per_client` 0: no bound per client."""

    def __init__(self, total: int, per_client: int) -> None:
        if total < 1 or per_client < 0:
            raise ValueError("total must be at least 1 and per_client at least 0")
        self.total = total
        self.per_client = per_client
        self.open = 0
        self._by_client: Counter[str] = Counter()

    def admit(self, client: str) -> str | None:
        """None when a new connection from client may stay open (and counts it); else why not."""
        if self.open >= self.total:
            return f"{self.open} connections open, the most this process's descriptors allow"
        if self.per_client and self._by_client[client] >= self.per_client:
            return f"{self.per_client} connections already open from {client}"
        self.open += 1
        self._by_client[client] += 1
        return None

    def release(self, client: str) -> None:
        """A connection admit() counted has closed."""
        self.open -= 1
        self._by_client[client] -= 1
        if not self._by_client[client]:
            del self._by_client[client]

    def from_client(self, client: str) -> int:
        return self._by_client[client]


def too_slow(seconds: float) -> str:
    """Why a connection was closed whose TLS handshake and first request's headers were not
    complete in time (on either port)."""
    return f"no TLS handshake and request headers within {seconds:g} s"


BODY_SECONDS = 30.0  # a request body's grace, by default (serve --body-timeout)
# Bytes a second a request body must average beyond its grace: the 4 MiB body cap then has
# the grace and 64 s, and a pivot's archive (up to 1 GiB) all it needs while it keeps coming.
BODY_RATE = 64 * 1024


def body_allowance(grace: float, received: int) -> float:
    """Seconds a request body may take from the end of its headers, received bytes of it
    having come so far: grace, and a second for each BODY_RATE bytes."""
    return grace + received / BODY_RATE


def body_too_slow(seconds: float) -> str:
    """Why a request was answered 408: its body took longer than its allowance."""
    return f"request body not complete within {seconds:.0f} s"
