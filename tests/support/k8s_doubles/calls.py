"""How tests use the doubles of this directory: the environment that puts them first in an
agent's PATH, and the calls they recorded."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.k8s_doubles.common import state as shared

DOUBLES = Path(__file__).parent


def doubled() -> set[str]:
    """The commands simulated here: the links to `double`."""
    return {p.name for p in DOUBLES.iterdir() if p.is_symlink()}


def agent_env(log: Path, state: Path, api_url: str) -> dict[str, str]:
    """An agent's environment additions: the doubles first in PATH, where they record (log),
    what they keep of the cluster (state, shared by every node), the test API server's URL."""
    return {"PATH": f"{DOUBLES}:{os.environ['PATH']}", "K8S_DOUBLES_LOG": str(log),
            "K8S_DOUBLES_STATE": str(state), "K8S_DOUBLES_API": api_url,
            "K8S_DOUBLES_PYTHON": sys.executable}


@dataclass(frozen=True)
class Call:
    host: str
    command: str
    argv: list[str]
    start: float
    end: float
    exit: int
    details: dict[str, Any]
    proxy: dict[str, str]  # the proxy variables in its environment

    def is_(self, command: str, *words: str) -> bool:
        """This command, its arguments starting with words (flags left out)."""
        positional = [a for a in self.argv if not a.startswith("-")]
        return self.command == command and positional[:len(words)] == list(words)


def calls(log: Path) -> list[Call]:
    """Every call recorded, in the order they ended."""
    if not log.exists():
        return []
    return [Call(**{k: v for k, v in json.loads(line).items() if k != "cwd"})
            for line in log.read_text().splitlines()]


def installed(state: Path, root: Path) -> dict[str, str]:
    """The version of each package apt-get or dnf installed in root, as they recorded it
    (state: the doubles' shared state directory)."""
    with shared(state) as data:
        return dict(data.get("installed", {}).get(str(root), {}))
