"""The coordinator must be reachable: name resolution, a TCP connection, then its health endpoint.

Each stage fails with its own message so the operator knows whether to look at DNS,
routing/firewalls or the coordinator itself.
"""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import os
import socket
import ssl
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import dns.asyncresolver
import dns.exception
import dns.resolver

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, skipped
from nodeagent.proxy import proxy_for
from nodeagent.trust import KEPT_CA, unverified_context


def hosts_file_lookup(text: str | None, name: str) -> list[str]:
    found = []
    for line in (text or "").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and name.lower() in (f.lower() for f in fields[1:]):
            found.append(fields[0])
    return found


async def resolve(host: Host, name: str, timeout: float) -> list[str]:
    """Addresses for name: a literal, /etc/hosts under root, then DNS via root's resolv.conf."""
    try:
        return [str(ipaddress.ip_address(name))]
    except ValueError:
        pass
    listed = hosts_file_lookup(host.read_text("/etc/hosts"), name)
    if listed:
        return listed
    resolver = dns.asyncresolver.Resolver(filename=str(host.path("/etc/resolv.conf")))
    resolver.lifetime = timeout
    addresses: list[str] = []
    errors = []
    for rdtype in ("A", "AAAA"):
        try:
            answer = await resolver.resolve(name, rdtype, search=True)
            addresses += [r.to_text() for r in answer]
        except (dns.resolver.NoAnswer, dns.resolver.NXDOMAIN) as exc:
            errors.append(exc)
    if not addresses and errors:
        raise errors[0]
    return addresses


def tls_context(ctx: CheckContext) -> tuple[ssl.SSLContext, str]:
    """Whom to trust for an https coordinator, and a note for the result: the configured CA,
    the one a registered agent keeps, or, before the first registration, nobody yet: then the
    check shows only that TLS answers, and the agent checks the CA against the join string's
    hash before it sends anything."""
    cfg = ctx.config
    kept = ctx.host.path(cfg.state_dir) / KEPT_CA
    if cfg.coordinator.ca_file:
        return ssl.create_default_context(cafile=cfg.coordinator.ca_file), ""
    if kept.exists():
        return ssl.create_default_context(cafile=str(kept)), ""
    if cfg.ca_hash:
        return unverified_context(), " (TLS not verified yet: the agent checks the CA against the join " \
                           "string's hash when it registers)"
    return ssl.create_default_context(), ""


def _http_get(url: str, address: str, proxy: str | None, timeout: float,
              context: ssl.SSLContext) -> int:
    """Status of GET url, connecting to address: the one resolved (through the root's files)
    and connected to before, the proxy's when there is one. Not whatever the system
    resolver makes of the name: that may not know it, or know another address.

    urllib rather than aiohttp: it imports in a fraction of the time, and the whole
    precheck run has a one-second budget."""
    import urllib.error

    scheme = urlsplit(url).scheme
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({scheme: proxy} if proxy else {}),
        _PinnedHTTPHandler(address),
        _PinnedHTTPSHandler(address, context),
        _NoRedirect(),
    )
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _pinned(
    connection: type[http.client.HTTPConnection], address: str
) -> Callable[..., http.client.HTTPConnection]:
    """A connection class for urllib that connects to address whatever host it is given
    (TLS still verifies the certificate against the host name)."""

    def connect(target: tuple[str, int], *args: Any) -> socket.socket:
        return socket.create_connection((address, target[1]), *args)

    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = connection(host, **kwargs)
        conn._create_connection = connect  # type: ignore[attr-defined]  # http.client's seam
        return conn

    return make


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_pinned(http.client.HTTPConnection, self.address), req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, address: str, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(context=context)
        self.address = address

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(
            _pinned(http.client.HTTPSConnection, self.address), req, context=self.context
        )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is reported as its status: the health endpoint must answer itself."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


async def run(ctx: CheckContext) -> Outcome:
    cfg = ctx.config.coordinator
    if not cfg.url:
        return skipped("no coordinator URL configured (coordinator.url in the config file)")
    parts = urlsplit(cfg.url)
    health_url = cfg.url.rstrip("/") + cfg.health_path
    proxy = proxy_for(cfg.url, ctx.config.proxy, os.environ)
    target = urlsplit(proxy) if proxy else parts
    name = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    via = f" via proxy {proxy}" if proxy else ""
    data: dict = {"url": cfg.url, "proxy": proxy, "host": name, "port": port}

    try:
        addresses = await resolve(ctx.host, name, cfg.timeout)
    except (dns.exception.DNSException, OSError) as exc:
        return failed(
            f"cannot resolve {name}{via}: {exc}",
            "check the nameservers in /etc/resolv.conf and that the name exists",
            **data,
        )
    data["addresses"] = addresses
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(addresses[0], port), cfg.timeout
        )
        writer.close()
    except (OSError, TimeoutError) as exc:
        # asyncio's own strerror ("Connect call failed ...") only repeats the address.
        reason = (
            "timed out" if isinstance(exc, TimeoutError)
            else os.strerror(exc.errno) if exc.errno else str(exc)
        )
        return failed(
            f"cannot connect to {addresses[0]}:{port} ({name}){via}: {reason}",
            "check routes and firewalls between this node and the coordinator, "
            "and that the coordinator is running",
            **data,
        )
    context, note = tls_context(ctx)
    try:
        status = await asyncio.to_thread(_http_get, health_url, addresses[0], proxy, cfg.timeout,
                                         context)
    except Exception as exc:
        return failed(
            f"GET {health_url}{via} failed: {type(exc).__name__}: {exc}",
            "check the coordinator URL (scheme and port) and its TLS certificate",
            **data,
        )
    data["status"] = status
    if status != 200:
        return failed(
            f"GET {health_url}{via} answered HTTP {status}",
            "check the coordinator's logs; its health endpoint must answer 200",
            **data,
        )
    return passed(f"coordinator at {cfg.url} is healthy{via}{note}", **data)
