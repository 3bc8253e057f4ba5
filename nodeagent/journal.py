"""The agent's durable record of applied items, so a restart (or kill -9, or power loss)
never re-runs a completed item and knows which one was interrupted. The whole file is
replaced atomically on every change: it is the old record or the new one, never a mix."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from nodeagent.atomic import atomic_write
from nodeagent.protocol import StateItem

JOURNAL_VERSION = 1


class JournalError(Exception):
    """The journal exists but cannot be read: refuse to guess what was applied."""


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._applied: dict[str, dict[str, Any]] = {}
        self._in_progress: str | None = None
        try:
            data = json.loads(path.read_bytes())
            if data["version"] != JOURNAL_VERSION:
                raise ValueError(f"version {data['version']}, this agent reads {JOURNAL_VERSION}")
            self._applied = dict(data["applied"])
            self._in_progress = data["in_progress"]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"cannot read the journal {path}: {exc!r}") from exc

    def applied(self, fingerprint: str) -> bool:
        return fingerprint in self._applied

    def in_progress(self) -> str | None:
        """The fingerprint of the item that started but has not succeeded: after a restart,
        the one the agent was applying when it stopped."""
        return self._in_progress

    def record_started(self, item: StateItem) -> None:
        self._in_progress = item.fingerprint()
        self._save()

    def record_applied(self, item: StateItem) -> None:
        fingerprint = item.fingerprint()
        self._applied[fingerprint] = {
            "name": item.name, "phase": item.phase, "version": item.version,
            "applied_at": time.time(),
        }
        if self._in_progress == fingerprint:
            self._in_progress = None
        self._save()

    def _save(self) -> None:
        document = {"version": JOURNAL_VERSION, "in_progress": self._in_progress,
                    "applied": self._applied}
        atomic_write(self.path, json.dumps(document, indent=1).encode(), mode=0o600)
