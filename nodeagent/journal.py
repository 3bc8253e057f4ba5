"""The agent's durable record of applied items, so a restart (or kill -9, or power loss)
never re-runs a completed item and knows which one was interrupted. The whole file is
replaced atomically on every change: it is the old record or the new one, never a mix.

A journal records one machine (the coordinator's machine id) in one incarnation: a machine
deleted and registered again is a new machine, and one back from a cluster in the pool, reset,
a new incarnation of it (Assignment.journal_owner): either way its items all run again. It
never records the items of job phases (mint, revoke) or remedies: each run of those is for
another machine, another minting or another time the machine was found unhealthy.

An applied item's entry keeps the values of its line outputs, which cannot be read again
(file outputs are: their files are), secret ones too: the file is 0600, as identity.json is."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent.atomic import atomic_write
from nodeagent.removal import set_aside
from nodeagent.wire.contract import UNJOURNALED_PHASES
from nodeagent.wire.protocol import StateItem

JOURNAL_VERSION = 1
log = logging.getLogger("nodeagent")


class JournalError(Exception):
    """The journal exists but cannot be read: refuse to guess what was applied."""


class Journal:
    """The journal of machine_id at path. One another machine wrote is set aside (kept under
    that machine's id) and this one starts empty; one that names no machine (an older agent
    wrote it) is this machine's."""

    def __init__(self, path: Path, machine_id: str) -> None:
        self.path = path
        self.machine_id = machine_id
        self._applied: dict[str, dict[str, Any]] = {}
        self._in_progress: str | None = None
        try:
            data = json.loads(path.read_bytes())
            if data["version"] != JOURNAL_VERSION:
                raise ValueError(f"version {data['version']}, this agent reads {JOURNAL_VERSION}")
            owner = data.get("machine_id", machine_id)
            applied, in_progress = dict(data["applied"]), data["in_progress"]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"cannot read the journal {path}: {exc!r}") from exc
        if owner == machine_id:
            self._applied, self._in_progress = applied, in_progress
            return
        kept = set_aside(path, str(owner))
        log.warning("the journal of machine %s is set aside as %s: this node is machine %s "
                    "now, whose items all run", owner, kept, machine_id)

    def applied(self, fingerprint: str) -> bool:
        return fingerprint in self._applied

    def recorded(self, item: StateItem) -> dict[str, str] | None:
        """The line outputs the item produced when it was applied; None when the journal
        does not have it applied. A job never is, even one whose fingerprint (which leaves
        the phase out) is an applied item's."""
        entry = self._applied.get(item.fingerprint())
        if entry is None or item.phase in UNJOURNALED_PHASES:
            return None
        return dict(entry.get("outputs", {}))

    def in_progress(self) -> str | None:
        """The fingerprint of the item that started but has not succeeded: after a restart,
        the one the agent was applying when it stopped."""
        return self._in_progress

    def record_started(self, item: StateItem) -> None:
        if item.phase in UNJOURNALED_PHASES:
            return
        self._in_progress = item.fingerprint()
        self._save()

    def record_applied(self, item: StateItem, outputs: Mapping[str, str] | None = None) -> None:
        """The item is applied, having produced outputs (those of its line outputs are kept)."""
        if item.phase in UNJOURNALED_PHASES:
            return
        fingerprint = item.fingerprint()
        self._applied[fingerprint] = {
            "name": item.name, "phase": item.phase, "version": item.version,
            "applied_at": time.time(),
        }
        lines = {o.name: outputs[o.name] for o in item.outputs
                 if o.file is None and outputs and o.name in outputs}
        if lines:
            self._applied[fingerprint]["outputs"] = lines
        if self._in_progress == fingerprint:
            self._in_progress = None
        self._save()

    def _save(self) -> None:
        document = {"version": JOURNAL_VERSION, "machine_id": self.machine_id,
                    "in_progress": self._in_progress, "applied": self._applied}
        atomic_write(self.path, json.dumps(document, indent=1).encode(), mode=0o600)
