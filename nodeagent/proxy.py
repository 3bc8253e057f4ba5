"""Which HTTP proxy a URL goes through: the config file's proxy section, else the environment."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from nodeagent.wire.endpoint import Endpoint
from nodeagent.wire.protocol import ProxySettings


def _env(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name.lower()) or environ.get(name.upper()) or None


def bypassed(host: str, no_proxy: list[str]) -> bool:
    """NO_PROXY semantics as curl has them: '*', domain suffixes, exact hosts, IPs and CIDRs."""
    host = host.lower().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy:
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        entry = entry.split(":")[0] if entry.count(":") == 1 else entry
        if address is not None:
            # An address matches an equal address or a CIDR, never a name suffix:
            # "0.1" must not bypass the proxy for 10.0.0.1.
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        suffix = entry.lstrip(".")
        if host == suffix or host.endswith("." + suffix):
            return True
    return False


def proxy_for(url: str, config: ProxySettings, environ: Mapping[str, str]) -> str | None:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        proxy = config.https or _env(environ, "https_proxy")
    else:
        proxy = config.http or _env(environ, "http_proxy")
    if not proxy:
        return None
    no_proxy = list(config.no_proxy)
    env_no_proxy = _env(environ, "no_proxy")
    if env_no_proxy:
        no_proxy += env_no_proxy.split(",")
    if bypassed(parts.hostname or "", no_proxy):
        return None
    return proxy


def coordinator_endpoints(urls: Iterable[str], config: ProxySettings,
                          environ: Mapping[str, str]) -> list[Endpoint]:
    """Each of the coordinator's replicas (the config's `coordinator.all_urls`), with the
    proxy to reach it through."""
    return [Endpoint(url, proxy_for(url, config, environ)) for url in urls]
