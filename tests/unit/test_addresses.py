"""The node's cluster address chosen from the interfaces its facts list: the one definition
behind the agent's node.interface / node.address and the operator's approve --interface /
--ip, each refusal listing what the node has."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.machines.approval import approval_address
from nodeagent.wire.addresses import AddressError, chosen, detected, interface_address, interface_of
from tests.support.builders import machine, node_facts

FACTS = node_facts()  # eth0 192.0.2.10 (default route), eth1 10.10.0.5 and fd10::5


def test_without_a_choice_the_default_route_interfaces_address_is_the_nodes() -> None:
    assert chosen(FACTS, "this node") == "192.0.2.10"


def test_an_interface_gives_its_ipv4_address_and_an_address_must_be_the_nodes() -> None:
    assert chosen(FACTS, "this node", interface="eth1") == "10.10.0.5"
    assert chosen(FACTS, "this node", address="fd10:0::5") == "fd10::5"
    assert interface_of(FACTS, "10.10.0.5") == "eth1"
    assert interface_of(FACTS, "203.0.113.9") == ""


def test_loopback_and_link_local_addresses_are_not_offered() -> None:
    assert detected(FACTS) == [("eth0", "192.0.2.10"), ("eth1", "10.10.0.5"),
                               ("eth1", "fd10::5")]


@pytest.mark.parametrize(("choice", "message"), [
    ({"interface": "eth9"}, "eth9 is not an interface of w1 (its interfaces: lo, eth0, eth1, "
     "eth2)"),
    ({"interface": "eth2"}, "interface eth2 of w1 has no IPv4 address (its addresses: eth0 "
     "192.0.2.10, eth1 10.10.0.5, eth1 fd10::5)"),
    ({"address": "10.10.0.6"}, "10.10.0.6 is not an address of w1 (its addresses: eth0 "
     "192.0.2.10, eth1 10.10.0.5, eth1 fd10::5)"),
    ({"address": "127.0.0.1"}, "127.0.0.1 is not an address of w1"),
    ({"address": "ten"}, "'ten' is not an IP address"),
])
def test_a_choice_the_node_does_not_have_is_refused_listing_what_it_has(
        choice: dict[str, str], message: str) -> None:
    with pytest.raises(AddressError) as refused:
        chosen(FACTS, "w1", **choice)
    assert str(refused.value).startswith(message)


def test_approval_checks_the_choice_against_the_machines_facts_naming_the_field() -> None:
    w1 = replace(machine("w1"), facts=FACTS, ip="192.0.2.10")
    assert approval_address(w1, None, None) == "192.0.2.10"
    assert approval_address(w1, "eth1", None) == "10.10.0.5"
    assert approval_address(w1, None, "10.10.0.5") == "10.10.0.5"
    with pytest.raises(Conflict, match=r"^ip: 10.9.9.9 is not an address of w1 \(its "):
        approval_address(w1, None, "10.9.9.9")
    with pytest.raises(Conflict, match=r"^interface: eth1 is not an interface of w1 \(it "
                       "reported no interfaces\\)"):
        approval_address(machine("w1"), "eth1", None)


def test_facts_of_another_shape_offer_no_address_and_fail_nothing() -> None:
    """Facts are what an agent sent, unchecked: bare interface names (an older or simulated
    agent) neither fail a view nor count as addresses."""
    facts = {"interfaces": ["eth0", "eth1"], "primary_ip": "10.0.0.7"}
    assert detected(facts) == []
    assert interface_of(facts, "10.0.0.7") == ""
    with pytest.raises(AddressError, match="eth0 is not an interface of n1"):
        interface_address(facts, "eth0", "n1")
