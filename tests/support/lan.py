"""A small LAN of network namespaces: a hub namespace holding a bridge (where the coordinator
runs) and node namespaces attached to it by veth pairs, each with its own hostname.

Addresses come from 198.18.0.0/24 (RFC 2544's test range) and exist only inside these
namespaces; nothing here is reachable from, or routed to, the real network.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tests.support.netns import Namespace, namespace

SUBNET_PREFIX = "198.18.0"
HUB_IP = f"{SUBNET_PREFIX}.1"


@dataclass
class Node:
    ns: Namespace
    hostname: str
    ip: str


@dataclass
class Lan:
    hub: Namespace
    nodes: list[Node]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def lan(hostnames: list[str]) -> Iterator[Lan]:
    with contextlib.ExitStack() as stack:
        hub = stack.enter_context(namespace())
        _ip("-n", hub.name, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub.name, "addr", "add", f"{HUB_IP}/24", "dev", "br0")
        _ip("-n", hub.name, "link", "set", "br0", "up")
        nodes = []
        for index, hostname in enumerate(hostnames):
            ns = stack.enter_context(namespace(hostname))
            ip = f"{SUBNET_PREFIX}.{10 + index}"
            port = f"v{index}"
            _ip("-n", hub.name, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns.name)
            _ip("-n", hub.name, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns.name, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns.name, "link", "set", "eth0", "up")
            _ip("-n", ns.name, "route", "add", "default", "via", HUB_IP)
            nodes.append(Node(ns, hostname, ip))
        yield Lan(hub, nodes)
