"""What the agent keeps as one machine record, set aside when that record is gone: a journal
belongs to the machine that applied its items, so a machine deleted and registered again runs
every item again (its prepare and deploy items, and its reset items at the next delete).

Standard library only: the daemon, which stays free of pydantic, forgets the machine when the
coordinator says it was deleted; a phase's child sets aside a journal of another machine.
"""

from __future__ import annotations

import re
from pathlib import Path

from nodeagent.atomic import fsync_dir
from nodeagent.identity import IDENTITY_FILE, NEXT_IDENTITY_FILE

JOURNAL_FILE = "journal.json"  # in the state dir
KEPT_JOURNALS = 3  # set-aside journals kept, the newest: what ran lately, within a bound


def set_aside(journal: Path, machine_id: str) -> Path | None:
    """Rename the journal after the machine it recorded (journal.<id>.json), for the operator
    to read, and keep only the newest KEPT_JOURNALS of those. The new path; None when there
    was no journal."""
    kept = journal.with_name(f"{journal.stem}.{re.sub(r'[^A-Za-z0-9_-]', '_', machine_id)}"
                             f"{journal.suffix}")
    try:
        journal.replace(kept)
    except FileNotFoundError:
        return None
    fsync_dir(journal.parent)
    older = sorted(journal.parent.glob(f"{journal.stem}.*{journal.suffix}"),
                   key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in older[KEPT_JOURNALS:]:
        stale.unlink(missing_ok=True)
    return kept


def forget_machine(state_dir: Path, machine_id: str) -> Path | None:
    """The machine's record is gone: its journal is set aside and its credentials deleted, so
    the next start registers a new machine from an empty journal. The set-aside journal."""
    kept = set_aside(state_dir / JOURNAL_FILE, machine_id)
    for name in (IDENTITY_FILE, NEXT_IDENTITY_FILE):
        (state_dir / name).unlink(missing_ok=True)
    fsync_dir(state_dir)
    return kept
