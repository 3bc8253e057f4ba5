"""Whether a server certificate's names cover the host agents are told: as a verifying
client judges it, not as strings compare."""

from __future__ import annotations

from pathlib import Path

from coordinator.server.advertised import default_host
from coordinator.server.pki import Pki, create, names_host

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


def test_a_wildcard_listen_advertises_the_hostname_only_when_the_certificate_names_it(
        tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    create(pki, ["coord.example", "10.0.0.5"])
    assert default_host("coord.example", pki.server_cert) == "coord.example"
    assert default_host("vm", pki.server_cert) == "coord.example", "vm is not in it"
    assert default_host("vm", None) == "vm"  # plain HTTP: nothing to verify against
