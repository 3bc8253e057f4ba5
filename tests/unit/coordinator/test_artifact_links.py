"""Signed artifact links: one opens its own artifact until it expires, and nothing else."""

from __future__ import annotations

from coordinator.edge.artifact_links import LINK_SECONDS, ArtifactLinks

LINKS = ArtifactLinks(b"k" * 32, 8443)
NOW = 1_800_000_000.0


def test_a_link_opens_its_artifact_until_it_expires() -> None:
    query = LINKS.query("bundle.bin", NOW)
    assert LINKS.valid("bundle.bin", query["expires"], query["signature"], NOW)
    assert LINKS.valid("bundle.bin", query["expires"], query["signature"], NOW + LINK_SECONDS)
    assert not LINKS.valid("bundle.bin", query["expires"], query["signature"],
                           NOW + LINK_SECONDS + 1)


def test_a_link_opens_no_other_artifact_nor_a_later_expiry() -> None:
    query = LINKS.query("bundle.bin", NOW)
    assert not LINKS.valid("other.bin", query["expires"], query["signature"], NOW)
    later = str(int(query["expires"]) + 3600)
    assert not LINKS.valid("bundle.bin", later, query["signature"], NOW)


def test_another_key_signs_other_links() -> None:
    query = ArtifactLinks(b"x" * 32, 8443).query("bundle.bin", NOW)
    assert not LINKS.valid("bundle.bin", query["expires"], query["signature"], NOW)


def test_a_garbled_query_opens_nothing() -> None:
    good = LINKS.query("bundle.bin", NOW)
    for expires, signature in [("", ""), ("-1", "00"), ("1e12", "00"), ("٣", "00"),
                               (good["expires"], "é" * 64)]:
        assert not LINKS.valid("bundle.bin", expires, signature, NOW)
