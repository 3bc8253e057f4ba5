"""What must be unique to each node of a fleet: its product_uuid and the MACs of its network
interfaces (kubeadm's install guide asks for both, and can only ask: a cloned VM carries its
template's). The node reads them; the coordinator, which sees every machine, judges whether
another machine has them (coordinator/domain/machines/clones.py), unless this check is ignored."""

from __future__ import annotations

import psutil

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext, Outcome, passed, skipped, warned

NAME = "machine-identity"
PRODUCT_UUID = "/sys/class/dmi/id/product_uuid"
_NO_MAC = "00:00:00:00:00:00"


def product_uuid(host: Host) -> str | None:
    """The firmware's system UUID (root-readable only), lowercased; None when unreadable."""
    text = (host.read_text(PRODUCT_UUID) or "").strip().lower()
    return text or None


def interface_macs() -> list[str]:
    """The MACs of the live network interfaces but loopback, lowercased, each once."""
    macs = {address.address.lower() for name, addresses in psutil.net_if_addrs().items()
            if name != "lo" for address in addresses
            if address.family == psutil.AF_LINK and address.address}
    return sorted(macs - {_NO_MAC, ""})


def evaluate(uuid: str | None, macs: list[str]) -> Outcome:
    data = {"product_uuid": uuid, "macs": macs}
    if uuid is None:
        return warned(f"{PRODUCT_UUID} is not readable: only the MACs can be compared with the "
                      "fleet's", "run the agent as root (the file is root-readable) on a host "
                      "whose firmware reports a system UUID", **data)
    return passed(f"product_uuid {uuid} and {len(macs)} MAC(s) reported: the coordinator "
                  "checks no other machine has them", **data)


async def run(ctx: CheckContext) -> Outcome:
    if NAME in ctx.ignored:  # nothing to compare: e.g. several test agents on one host
        return skipped("ignored (--ignore): its product_uuid and MACs are not reported, and "
                       "the coordinator compares nothing")
    return evaluate(product_uuid(ctx.host), interface_macs())
