"""A cluster's status kept between calls: the dashboard and `status --watch` ask for it every
second or so, and at 10,000 machines summing every machine's share anew costs about half a
second although few machines changed since the last call.

Pure: each call is handed the machines and their history as they are now (the service keeps
them current). A machine's share (status.MachinePart) is computed again only when the machine
or its history changed, or when it depends on the clock; the stages are summed again only when
a share changed or the last answer depended on the clock. Whatever was kept, the answer is the
one status.py computes from scratch (tests/unit/coordinator/test_statusmemo.py checks it over
random changes and times). A clock that went back drops everything kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.domain.model import ClusterSpec, Machine
from coordinator.domain.nodes.workloads import SystemWorkloads
from coordinator.domain.rollout.steps import History
from coordinator.domain.views.status import (
    MachinePart,
    PostDeploy,
    Progress,
    Rollout,
    Stage,
    held_by,
    machine_part,
    post_deploy,
    progress_of,
    stages_of,
)


@dataclass(frozen=True)
class Summary:
    """What the status says of a cluster as a whole."""

    counts: dict[str, int]  # machines per state
    post_deploy: PostDeploy
    stages: list[Stage]
    rollout: Rollout


@dataclass(frozen=True)
class _Answer:
    """The last answer, and what it was computed from besides the shares."""

    created: float
    system: SystemWorkloads | None
    counts: dict[str, int]
    post_deploy: PostDeploy
    stages: list[Stage]
    clock_read: bool  # the stages depend on the clock: summed again on the next call
    progress: Progress


class StatusMemo:
    def __init__(self) -> None:
        self._spec: ClusterSpec | None = None
        self._now = -math.inf
        self._parts: dict[str, tuple[Machine, int, MachinePart]] = {}  # id -> (as of, version, part)
        self._last: list[MachinePart] = []
        self._answer: _Answer | None = None

    def summary(self, spec: ClusterSpec, created: float, machines: Sequence[Machine],
                history: History, now: float, system: SystemWorkloads | None = None) -> Summary:
        """The status of the cluster of spec, its machines (in the order the store lists
        them) and their history, as of now."""
        if (spec is not self._spec and spec != self._spec) or now < self._now:
            self._parts.clear()
            self._answer = None
        self._spec, self._now = spec, now
        parts = []
        kept_parts, versions = self._parts, history.versions
        for m in machines:  # one pass over every machine on every call: kept lean
            kept = kept_parts.get(m.id)
            if kept is None or kept[0] is not m or kept[1] != versions.get(m.id, 0) or \
                    kept[2].timed:
                kept = kept_parts[m.id] = (m, versions.get(m.id, 0),
                                           machine_part(spec, m, history, now))
            parts.append(kept[2])
        same = len(parts) == len(self._last) and all(
            a is b for a, b in zip(parts, self._last, strict=True))
        if not same and len(kept_parts) > len(parts):  # machines went: forget their parts
            self._parts = {p.machine.id: kept_parts[p.machine.id] for p in parts}
        self._last = parts
        answer = self._answer
        if not same or answer is None or answer.clock_read or answer.created != created or \
                answer.system != system:
            found, clock_read = stages_of(spec, created, parts, now, system)
            counts: dict[str, int] = {}
            for p in parts:
                counts[p.state] = counts.get(p.state, 0) + 1
            answer = self._answer = _Answer(created, system, counts, post_deploy(spec, machines),
                                            found, clock_read,
                                            progress_of(p.run for p in parts))
        return Summary(dict(answer.counts), answer.post_deploy, list(answer.stages),
                       answer.progress.at(now, held_by(spec, answer.stages)))
