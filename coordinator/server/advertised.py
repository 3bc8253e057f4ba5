"""The URL join strings give agents must name a host the server certificate holds: agents
verify the coordinator against it, so any other name would leave every one of them unable to
register. With a wildcard --listen and no --advertise-url, the host is this machine's name when
the certificate holds it, else the certificate's first name (the first `init --name`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from coordinator.server import pki


def default_host(hostname: str, cert: Path | None) -> str:
    """The host to advertise when --listen is a wildcard: hostname, unless the certificate at
    cert (None: plain HTTP) does not name it and names something else."""
    if cert is None or not cert.exists():
        return hostname
    names = pki.certificate_names(cert)
    return hostname if pki.names_host(names, hostname) or not names else names[0]


def unnamed(url: str, explicit: bool, port: int, cert: Path) -> str | None:
    """None when the certificate at cert names url's host; else what is wrong and how to fix
    it. explicit: url came from --advertise-url (rather than from --listen)."""
    host = urlsplit(url).hostname or ""
    names = pki.certificate_names(cert)
    if pki.names_host(names, host):
        return None
    source = "--advertise-url" if explicit else "--listen"
    return (f"agents would be told to reach {url} ({source}), but the server certificate "
            f"{cert} does not name {host or 'a host'}: it names {', '.join(names) or 'nothing'}, "
            "and agents would refuse it. Pass --advertise-url https://NAME:"
            f"{port} with NAME one of those, or have the certificate name {host or 'it'}: "
            f"`coordinator init --name {host or 'HOST'} ...` (a new data dir and CA, so before "
            "any agent joined)")
