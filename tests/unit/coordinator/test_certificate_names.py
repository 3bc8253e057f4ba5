"""Whether a server certificate's names cover the host agents are told: as a verifying
client judges it, not as strings compare."""

from __future__ import annotations

from coordinator.server.pki import names_host

NAMES = ["coord.example", "*.lab.example", "10.0.0.5", "2001:db8::1"]


def test_addresses_compare_as_addresses() -> None:
    assert names_host(NAMES, "10.0.0.5")
    assert names_host(NAMES, "2001:DB8:0::1") and names_host(NAMES, "[2001:db8::1]")
    assert not names_host(NAMES, "10.0.0.50")
    assert not names_host(["coord.example"], "10.0.0.5")


def test_dns_names_ignore_case_and_a_wildcard_covers_one_label() -> None:
    assert names_host(NAMES, "COORD.example") and names_host(NAMES, "coord.example.")
    assert names_host(NAMES, "node.lab.example")
    assert not names_host(NAMES, "lab.example") and not names_host(NAMES, "a.b.lab.example")
    assert not names_host(NAMES, "vm")
