"""Counting connections by client: a client's share, the total, and who counts as one client;
a request body's allowance."""

from __future__ import annotations

from coordinator.edge.connections import ConnectionCounts, body_allowance, body_too_slow, client_of


def test_a_client_holds_its_share_and_all_together_the_total() -> None:
    counts = ConnectionCounts(total=3, per_client=2)
    assert counts.admit("10.0.0.1") is None and counts.admit("10.0.0.1") is None
    assert counts.admit("10.0.0.1") == "2 connections already open from 10.0.0.1"
    assert counts.admit("10.0.0.2") is None
    assert "the most this process's descriptors allow" in (counts.admit("10.0.0.3") or "")
    counts.release("10.0.0.1")
    assert counts.admit("10.0.0.3") is None and counts.from_client("10.0.0.1") == 1


def test_no_bound_per_client_when_it_is_zero() -> None:
    counts = ConnectionCounts(total=5, per_client=0)
    assert all(counts.admit("10.0.0.1") is None for _ in range(5))


def test_an_ipv6_client_is_its_64_and_a_mapped_ipv4_address_is_itself() -> None:
    assert client_of("2001:db8:1:2:aaaa::1") == client_of("2001:db8:1:2:bbbb::9") \
        == "2001:db8:1:2::/64"
    assert client_of("::ffff:192.0.2.7") == client_of("192.0.2.7") == "192.0.2.7"
    assert client_of("fe80::1%eth0") == "fe80::/64"


def test_a_body_has_its_grace_and_a_second_for_each_64_kib_it_sent() -> None:
    assert body_allowance(30, 0) == 30  # a byte at a time: cut off after the grace
    assert body_allowance(30, 4 * 2**20) == 30 + 64  # the API's body cap, at the least rate
    assert body_too_slow(body_allowance(30, 100_000)) == \
        "request body not complete within 32 s"
