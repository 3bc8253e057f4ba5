"""A node's cluster address, chosen from the interfaces its facts list (facts.py), because the
default-route interface the facts call primary is often not the cluster network. One
definition for both choosers: the agent's config (`node.interface` or `node.address`, what it
registers with) and the operator's approval (`--interface` or `--ip`). Standard library only:
the daemon and the coordinator's domain use it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any


class AddressError(ValueError):
    """The interface or address asked for is not the node's; the message lists what is."""


def _interfaces_in(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The interfaces the facts list, as facts.py writes them: facts are what an agent sent,
    unchecked (an older agent's, or a simulated one's, may list bare names), and whatever
    they hold must not fail a view or an approval."""
    listed = facts.get("interfaces")
    return [i for i in listed if isinstance(i, Mapping)] if isinstance(listed, list) else []


def detected(facts: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(interface, address) of each address the node reported, loopback and link-local
    (which no other node can reach) left out, in the order its facts list them."""
    found = []
    for interface in _interfaces_in(facts):
        for entry in interface.get("addresses") or []:
            try:
                parsed = ipaddress.ip_address(entry.get("address", ""))
            except (ValueError, AttributeError, TypeError):
                continue
            if not (parsed.is_loopback or parsed.is_link_local):
                found.append((interface.get("name", ""), str(parsed)))
    return found


def interface_address(facts: Mapping[str, Any], name: str, who: str) -> str:
    """The first IPv4 address of interface name (who: how the node is called in the error)."""
    names = [i.get("name", "") for i in _interfaces_in(facts)]
    if name not in names:
        raise AddressError(f"{name} is not an interface of {who} ({_interfaces(names)})")
    ipv4 = [address for interface, address in detected(facts)
            if interface == name and ipaddress.ip_address(address).version == 4]
    if not ipv4:
        raise AddressError(f"interface {name} of {who} has no IPv4 address "
                           f"({_addresses(facts)})")
    return ipv4[0]


def own_address(facts: Mapping[str, Any], address: str, who: str) -> str:
    """address, once it is one the node reported (written in its canonical form)."""
    try:
        wanted = str(ipaddress.ip_address(address))
    except ValueError:
        raise AddressError(f"{address!r} is not an IP address") from None
    if wanted not in (found for _, found in detected(facts)):
        raise AddressError(f"{wanted} is not an address of {who} ({_addresses(facts)})")
    return wanted


def chosen(facts: Mapping[str, Any], who: str, interface: str | None = None,
           address: str | None = None) -> str | None:
    """The node's cluster address: interface's IPv4, or address, when one is asked for;
    else the default-route interface's (the facts' primary_ip)."""
    if interface:
        return interface_address(facts, interface, who)
    if address:
        return own_address(facts, address, who)
    primary = facts.get("primary_ip")
    return str(primary) if primary else None


def interface_of(facts: Mapping[str, Any], address: str | None) -> str:
    """The interface that holds address ("" when none does): what ${machine.interface} is."""
    return next((name for name, found in detected(facts) if found == address), "")


def _interfaces(names: list[str]) -> str:
    return "its interfaces: " + ", ".join(names) if names else "it reported no interfaces"


def _addresses(facts: Mapping[str, Any]) -> str:
    found = detected(facts)
    if not found:
        return "it reported no addresses"
    return "its addresses: " + ", ".join(f"{name} {address}" for name, address in found)
