"""What the packaged coordinator.service gives the coordinator."""

from __future__ import annotations

from tests.support.units import coordinator_descriptors


def test_the_unit_gives_descriptors_for_ten_thousand_agents() -> None:
    """Each agent keeps a connection or two open; systemd's default of 1,024 ran out at about a
    thousand agents."""
    assert coordinator_descriptors() >= 2 * 10_000 + 1024
