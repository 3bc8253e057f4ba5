"""What a node reports about itself at registration: identity, addresses, hardware (its block
devices: blockdevices.py), OS."""

from __future__ import annotations

import socket
from typing import Any

import psutil

from nodeagent.blockdevices import block_devices
from nodeagent.host import Host
from nodeagent.prechecks.machine_identity import product_uuid
from nodeagent.prechecks.os_release import read_os_release


def network() -> dict[str, Any]:
    """Interfaces with their addresses, and the primary IP: the default-route interface's address."""
    from pyroute2 import IPRoute  # heavy import; only facts need it

    with IPRoute() as ipr:
        links = {link["index"]: link for link in ipr.get_links()}
        addresses: dict[int, list[dict[str, Any]]] = {}
        for addr in ipr.get_addr():
            family = "inet" if addr["family"] == socket.AF_INET else "inet6"
            addresses.setdefault(addr["index"], []).append(
                {
                    "family": family,
                    "address": addr.get_attr("IFA_ADDRESS"),
                    "prefixlen": addr["prefixlen"],
                }
            )
        default_ifindex = None
        for route in ipr.get_default_routes(family=socket.AF_INET):
            default_ifindex = route.get_attr("RTA_OIF")
            break
    interfaces = [
        {
            "name": link.get_attr("IFLA_IFNAME"),
            "mac": link.get_attr("IFLA_ADDRESS"),
            "state": link.get_attr("IFLA_OPERSTATE"),
            "mtu": link.get_attr("IFLA_MTU"),
            "addresses": addresses.get(index, []),
        }
        for index, link in sorted(links.items())
    ]
    return {
        "primary_ip": primary_ip(interfaces, links, default_ifindex),
        "default_interface": links[default_ifindex].get_attr("IFLA_IFNAME")
        if default_ifindex in links
        else None,
        "interfaces": interfaces,
    }


def primary_ip(
    interfaces: list[dict[str, Any]], links: dict[int, Any], default_ifindex: int | None
) -> str | None:
    """The default-route interface's IPv4; without a default route, the first non-loopback one."""
    by_name = {i["name"]: i for i in interfaces}
    ordered = []
    if default_ifindex in links:
        ordered.append(by_name[links[default_ifindex].get_attr("IFLA_IFNAME")])
    ordered += [i for i in interfaces if i["name"] != "lo"]
    for iface in ordered:
        for addr in iface["addresses"]:
            if addr["family"] == "inet" and not addr["address"].startswith("127."):
                return addr["address"]
    return None


def hardware() -> dict[str, Any]:
    memory = psutil.virtual_memory()
    disks = []
    for part in psutil.disk_partitions(all=False):
        try:
            usage = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue
        disks.append(
            {
                "device": part.device,
                "mountpoint": part.mountpoint,
                "fstype": part.fstype,
                "total_bytes": usage.total,
                "free_bytes": usage.free,
            }
        )
    return {
        "cpu": {
            "logical": psutil.cpu_count(logical=True),
            "physical": psutil.cpu_count(logical=False),
        },
        "memory": {"total_bytes": memory.total, "available_bytes": memory.available},
        "disks": disks,
    }


def collect(host: Host) -> dict[str, Any]:
    os_fields = read_os_release(host) or {}
    return {
        "hostname": host.kernel_hostname(),
        "product_uuid": product_uuid(host),
        **network(),
        **hardware(),
        "block_devices": block_devices(host),
        "os": {
            "id": os_fields.get("ID", ""),
            "version_id": os_fields.get("VERSION_ID", ""),
            "pretty_name": os_fields.get("PRETTY_NAME", ""),
            "kernel": host.kernel_release(),
        },
    }
