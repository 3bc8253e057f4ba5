"""Each text an action's templated() lists is one the agent fills values into, so the
coordinator checks a spec's placeholders exactly where the node would meet them: a ${nope}
there fails the item naming it, and the texts it does not list are written as they are."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from nodeagent.wire.protocol import Location, StateItem
from tests.support.items import PYTHON, apply, make_item

pytestmark = pytest.mark.integration

# One action of each kind with every templated field set, applied successfully as it is.
ACTIONS: dict[str, dict[str, Any]] = {
    "exec": {"type": "exec", "argv": ["true", "${cluster.name}"], "env": {"A": "a"}, "cwd": "."},
    "file": {"type": "file", "path": "/etc/app.conf", "template": "name=${cluster.name}\n"},
    "version": {"type": "version", "argv": [PYTHON, "-c", "print(1)"], "expect": "1"},
}


def templated(kind: str) -> list[Location]:
    return [location for location, _ in make_item("x", ACTIONS[kind]).action.templated()]


def with_text(action: dict[str, Any], location: Location, text: str) -> StateItem:
    changed = copy.deepcopy(action)
    *parents, last = location
    holder = changed
    for part in parents:
        holder = holder[part]
    holder[last] = text
    return make_item("x", changed)


@pytest.mark.parametrize(("kind", "location"),
                         [(kind, location) for kind in ACTIONS for location in templated(kind)])
async def test_a_placeholder_in_a_templated_text_is_filled_in_by_the_agent(
        kind: str, location: Location, root: Path) -> None:
    assert (await apply(make_item("x", ACTIONS[kind]), root)).succeeded
    outcome = await apply(with_text(ACTIONS[kind], location, "${nope}"), root)
    assert not outcome.succeeded
    assert "unknown template value ${nope}" in outcome.error


async def test_texts_not_templated_are_written_as_they_are(root: Path) -> None:
    item = make_item("x", {"type": "file", "path": "/etc/${nope}", "content": "${nope}\n"})
    assert item.action.templated() == []
    assert (await apply(item, root)).succeeded
    assert (root / "etc/${nope}").read_text() == "${nope}\n"
