"""The URL join strings give agents must name a host the server certificate holds: agents
verify the coordinator against it, so any other name (e.g. this machine's own, taken by
default when --listen is a wildcard) would leave every one of them unable to register."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from coordinator.server import pki


def unnamed(url: str, explicit: bool, port: int, cert: Path) -> str | None:
    """None when the certificate at cert names url's host; else what is wrong and how to fix
    it. explicit: url came from --advertise-url (rather than from --listen)."""
    host = urlsplit(url).hostname or ""
    names = pki.certificate_names(cert)
    if pki.names_host(names, host):
        return None
    source = ("--advertise-url" if explicit else
              "this machine's name: --listen is a wildcard address and no --advertise-url is "
              "given")
    return (f"agents would be told to reach {url} ({source}), but the server certificate "
            f"{cert} does not name {host or 'a host'}: it names {', '.join(names) or 'nothing'}, "
            "and agents would refuse it. Pass --advertise-url https://NAME:"
            f"{port} with NAME one of those, or have the certificate name {host or 'it'}: "
            f"`coordinator init --name {host or 'HOST'} ...` (a new data dir and CA, so before "
            "any agent joined)")
