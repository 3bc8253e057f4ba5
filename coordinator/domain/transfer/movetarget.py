"""The move target set or cleared (`PUT|DELETE /v1/move-target`, a pivot's announcement), as
one change: the target and every machine's new generation written together, so that no agent
is left untold by a crash between them; every agent woken to fetch it."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.changes import Change, Retarget, bumped
from coordinator.domain.model import Machine
from coordinator.domain.transfer.pivot import target_problems
from nodeagent.wire.protocol import MoveTarget
from nodeagent.wire.validation import InvalidDocument


def announced(before: MoveTarget | None, urls: list[str], ca_pin: str | None,
              machines: Sequence[Machine], now: float) -> tuple[MoveTarget, Change]:
    """The target urls (checked against ca_pin) and the change telling every agent to move
    there; InvalidDocument, naming each field, unless they are https and pinned. The target
    already set keeps its `since` and is announced again: running a pivot again tells an
    agent nothing new, and costs it one read of the same work."""
    problems = target_problems([("url", url) for url in urls], "caPin", ca_pin)
    if problems:
        raise InvalidDocument(problems)
    same = before is not None and before.urls == urls and before.ca_pin == ca_pin
    target = before if same and before is not None else \
        MoveTarget(urls=urls, ca_pin=ca_pin, since=now)
    return target, _announcing(target.model_dump_json(), machines)


def withdrawn(machines: Sequence[Machine]) -> Change:
    """The change telling every agent to stay (a pivot rolled back), announced even when no
    target was set: an agent that moved comes back once the target stops answering."""
    return _announcing(None, machines)


def _announcing(doc: str | None, machines: Sequence[Machine]) -> Change:
    again = bumped(machines)
    return Change(machines=again, retarget=Retarget(doc), wake=[m.id for m in again])
