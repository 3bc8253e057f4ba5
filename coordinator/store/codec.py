"""How model objects become JSON documents, shared by every store backend (no SQL here).

Machines are stored as one document each so that adding a field to Machine needs no
schema migration: documents written before the field existed decode with its default.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from coordinator.model import ClusterSpec, DrainStage, DrainStatus, Machine, MachineState, Progress

_MACHINE_FIELDS = tuple(f.name for f in fields(Machine))
_PROGRESS_FIELDS = tuple(f.name for f in fields(Progress))
_DRAIN_FIELDS = tuple(f.name for f in fields(DrainStatus))


def dumps(value: Any) -> str:
    """Canonical JSON: sorted keys so equal values give equal text (spec change detection),
    and no NaN/Infinity, which PostgreSQL's jsonb would refuse."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def machine_to_doc(machine: Machine) -> dict[str, Any]:
    """A JSON-able dict of every field, to serialize at once: facts and precheck are shared
    with the machine, as deep-copying them would cost more than the rest of a commit."""
    doc = {name: getattr(machine, name) for name in _MACHINE_FIELDS}
    doc["state"] = machine.state.value
    doc["applied"] = sorted(machine.applied)
    doc["managers"] = list(machine.managers)
    doc["progress"] = None if machine.progress is None else asdict(machine.progress)
    doc["drain"] = None if machine.drain is None else asdict(machine.drain)
    return doc


def machine_from_doc(doc: Mapping[str, Any]) -> Machine:
    """The inverse of machine_to_doc. Missing keys take the field's default and unknown keys
    are ignored, so documents survive fields being added to or dropped from Machine."""
    values = {name: doc[name] for name in _MACHINE_FIELDS if name in doc}
    if "state" in values:
        values["state"] = MachineState(values["state"])
    if "applied" in values:
        values["applied"] = frozenset(values["applied"])
    if values.get("progress") is not None:
        progress = values["progress"]
        values["progress"] = Progress(**{n: progress[n] for n in _PROGRESS_FIELDS if n in progress})
    if "managers" in values:
        values["managers"] = tuple(values["managers"])
    if values.get("drain") is not None:
        drain = {n: values["drain"][n] for n in _DRAIN_FIELDS if n in values["drain"]}
        drain["stage"] = DrainStage(drain["stage"])
        for name in ("blocking_pods", "blocking_budgets"):
            drain[name] = tuple(drain.get(name, ()))
        values["drain"] = DrainStatus(**drain)
    return Machine(**values)


def spec_to_json(spec: ClusterSpec) -> str:
    """Canonical JSON of a cluster spec (camelCase, as the operator writes it)."""
    return dumps(spec.model_dump(mode="json", by_alias=True))


@functools.lru_cache(maxsize=64)
def spec_from_json(text: str) -> ClusterSpec:
    """Cached: every assignment reads its cluster, and validating the spec each time would
    cost more than the rest of the request. Specs are frozen, so sharing one is safe."""
    return ClusterSpec.model_validate_json(text)
