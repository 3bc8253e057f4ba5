"""The move target set or cleared (domain/transfer/movetarget.py): the target and every machine's new
generation are one change, so no agent is left untold between two writes; a repeat keeps its
`since`; a target that is not https and pinned decides nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.changes import Retarget
from coordinator.domain.transfer.movetarget import announced, withdrawn
from nodeagent.wire.protocol import MoveTarget
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import machine

PIN = "sha256:" + "b" * 64
FLEET = [replace(machine(f"w{i}"), id=f"w{i}", generation=i) for i in (1, 2)]
HELD = MoveTarget(urls=["https://new:8443"], ca_pin=PIN, since=10.0)


@pytest.mark.parametrize(("before", "urls", "since"), [
    (None, ["https://new:8443"], 99.0),  # a first target: set now
    (HELD, ["https://new:8443"], 10.0),  # the same again: its since kept, announced again
    (HELD, ["https://other:8443"], 99.0),  # another: replaces it
    (HELD, ["https://new:8443", "https://new-2:8443"], 99.0),
])
def test_a_target_is_written_with_every_machines_new_generation(
        before: MoveTarget | None, urls: list[str], since: float) -> None:
    target, change = announced(before, urls, PIN, FLEET, 99.0)
    assert target == MoveTarget(urls=urls, ca_pin=PIN, since=since)
    assert change.retarget == Retarget(target.model_dump_json())
    assert [(m.id, m.generation) for m in change.machines] == [("w1", 2), ("w2", 3)]
    assert list(change.wake) == ["w1", "w2"] and not change.events and not change.removed


@pytest.mark.parametrize(("urls", "pin", "field"), [
    (["http://new:8080"], PIN, "url"),
    (["https://new:8443"], None, "caPin"),
    (["https://new:8443", "http://new-2:8080"], PIN, "url"),
])
def test_a_target_not_https_and_pinned_decides_nothing(urls: list[str], pin: str | None,
                                                       field: str) -> None:
    with pytest.raises(InvalidDocument) as refused:
        announced(None, urls, pin, FLEET, 99.0)
    assert field in [p.path for p in refused.value.problems]


def test_clearing_is_announced_to_every_machine_even_with_no_target() -> None:
    change = withdrawn(FLEET)
    assert change.retarget == Retarget(None)
    assert [(m.id, m.generation) for m in change.machines] == [("w1", 2), ("w2", 3)]
    assert list(change.wake) == ["w1", "w2"]
