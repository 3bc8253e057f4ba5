"""`machines label` decided: a machine's labels set and removed (labels.relabelled) as one
change with its event and a new generation, since its items may depend on them
(${machine.labels}, `when: labels`). Apart from labels.py, which the model's settings import
and so imports nothing of the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from coordinator.domain.changes import Change
from coordinator.domain.events import event
from coordinator.domain.labels import label_list, relabelled
from coordinator.domain.model import Machine


def labelling(machine: Machine, put: Mapping[str, str], remove: Sequence[str],
              now: float) -> Change:
    """The change that sets put and removes remove on machine's labels: its assignment made
    again (its agent woken, a pass asked for); nothing when the labels stay what they are."""
    labels = relabelled(machine.labels, put, remove)
    if labels == machine.labels:
        return Change()
    updated = replace(machine, labels=labels, generation=machine.generation + 1)
    return Change(machines=[updated], events=[event(
        now, machine.cluster, "labels", f"{machine.hostname} labels: "
        f"{label_list(labels) or 'none'}", updated,
        {"labels": labels, "set": dict(put), "removed": list(remove)})],
        wake=[machine.id], kick=True)
