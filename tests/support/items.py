"""Items built and applied for real in the item tests: commands run, files land in a temp
root; the only stand-in is the artifact source, the daemon's seam."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from nodeagent.items.outcome import ItemOutcome
from nodeagent.items.runner import apply_item
from nodeagent.protocol import ProxySettings, StateItem

PYTHON = sys.executable
VALUES = {"cluster.name": "edge-1", "machine.hostname": "node-a", "machine.ip": "10.0.0.5"}


def make_item(name: str, action: dict[str, Any], **fields: Any) -> StateItem:
    return StateItem.model_validate({"name": name, "phase": "prepare", "action": action, **fields})


def exec_item(name: str, argv: list[str], **fields: Any) -> StateItem:
    action = {"type": "exec", "argv": argv}
    action.update({k: fields.pop(k) for k in ("env", "cwd", "expectedExitCodes") if k in fields})
    return make_item(name, action, **fields)


async def no_artifacts(name: str) -> AsyncIterator[bytes]:
    raise AssertionError(f"no artifact expected, asked for {name}")
    yield b""  # pragma: no cover - makes this an async generator


async def apply(item: StateItem, root: Path, values: dict[str, str] | None = None,
                proxy: ProxySettings | None = None) -> ItemOutcome:
    return await apply_item(item, VALUES if values is None else values, root, no_artifacts,
                            proxy or ProxySettings())


def leftovers(directory: Path) -> list[str]:
    """Temp files an atomic write left behind (there must never be any)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".nodeagent-tmp"))
