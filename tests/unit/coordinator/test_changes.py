"""The change record every operation decides (domain/changes.py): combined in order, and
whether it writes anything at all."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.changes import Change, Retarget, TokenUse, combined
from coordinator.domain.records import Event
from tests.support.builders import machine


def said(message: str) -> Event:
    return Event(time=1.0, cluster="edge", kind="test", message=message)


W1, W2 = machine("w1"), machine("w2")


@pytest.mark.parametrize(("change", "writes"), [
    (Change(), False),
    (Change(wake=["w1"], kick=True), False),  # waking writes nothing
    (Change(machines=[W1]), True),
    (Change(events=[said("x")]), True),
    (Change(removed={"w1": 1.0}), True),
    (Change(retarget=Retarget(None)), True),  # clearing the target is a write
    (Change(dropped=["edge"]), True),
    (Change(token_use=TokenUse("hash", 1.0)), True),  # counting a use is a write
])
def test_whether_a_change_writes(change: Change, writes: bool) -> None:
    assert change.writes is writes


def test_changes_combine_in_order_the_last_target_winning() -> None:
    total = combined([
        Change(machines=[W1], events=[said("a")], wake=["w1"], retarget=Retarget("{}")),
        Change(removed={"w2": 2.0}, events=[said("b")], wake=["w2"], kick=True),
        Change(retarget=Retarget(None)),
    ])
    assert total.machines == [W1] and total.removed == {"w2": 2.0}
    assert [e.message for e in total.events] == ["a", "b"]
    assert list(total.wake) == ["w1", "w2"] and total.kick
    assert total.retarget == Retarget(None)


def test_a_clusters_drop_and_a_token_use_combine_too() -> None:
    total = combined([Change(dropped=["a"], token_use=TokenUse("h", 1.0)),
                      Change(dropped=["b"]), Change(machines=[W1])])
    assert list(total.dropped) == ["a", "b"] and total.token_use == TokenUse("h", 1.0)


def test_a_machine_two_combined_changes_write_is_written_once_as_the_later_left_it() -> None:
    """A batch of reports from one agent (its second on top of its first) costs one row."""
    first, second = replace(W1, generation=2), replace(W1, generation=3)
    total = combined([Change(machines=[first], events=[said("a")]),
                      Change(machines=[W2]), Change(machines=[second], events=[said("b")])])
    assert [(m.hostname, m.generation) for m in total.machines] == [("w1", 3), ("w2", W2.generation)]
    assert [e.message for e in total.events] == ["a", "b"]
