"""`machines label` decided (domain/machines/labelling.py): the change a label edit makes, or none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.machines.labelling import labelling
from coordinator.domain.model import MachineState
from tests.support.builders import machine

W1 = replace(machine("w1", state=MachineState.READY), labels={"zone": "a", "rack": "1"},
             generation=4)


@pytest.mark.parametrize(("put", "remove", "labels", "message"), [
    ({"zone": "b"}, [], {"zone": "b", "rack": "1"}, "w1 labels: rack=1,zone=b"),
    ({"gpu": ""}, ["rack"], {"zone": "a", "gpu": ""}, "w1 labels: gpu=,zone=a"),
    ({}, ["zone", "rack"], {}, "w1 labels: none"),
    ({"zone": "a"}, ["absent"], None, None),
    ({}, [], None, None),
], ids=["overwritten", "set-and-removed", "all-removed", "same-again", "nothing"])
def test_a_label_edit_is_one_change_or_none(put: dict[str, str], remove: list[str],
                                            labels: dict[str, str] | None,
                                            message: str | None) -> None:
    change = labelling(W1, put, remove, 20.0)
    if labels is None:
        assert not change.writes and not change.wake and not change.kick
        return
    [updated] = change.machines
    assert (updated.labels, updated.generation) == (labels, 5)  # its items may depend on them
    assert [(e.kind, e.message, e.data) for e in change.events] == [
        ("labels", message, {"labels": labels, "set": put, "removed": remove})]
    assert (list(change.wake), change.kick) == ([W1.id], True)
