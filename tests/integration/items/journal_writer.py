"""A process that records items in a journal as fast as it can, until it is killed:
`python -m tests.integration.items.journal_writer PATH`. Kept free of pytest so that it
starts quickly. It prints the number of the first item it records, once it loaded PATH."""

from __future__ import annotations

import sys
from pathlib import Path

from nodeagent.journal import Journal
from nodeagent.wire.protocol import StateItem


def numbered(n: int) -> StateItem:
    return StateItem.model_validate({"name": f"item-{n}", "phase": "prepare", "version": str(n),
                                     "action": {"type": "exec", "argv": ["true"]}})


def applied_prefix(journal: Journal) -> int:
    """How many of item-0, item-1, ... in a row are applied."""
    n = 0
    while journal.applied(numbered(n).fingerprint()):
        n += 1
    return n


def main(path: Path) -> None:
    journal = Journal(path, "m-1")
    n = applied_prefix(journal)
    print(n, flush=True)
    while True:
        journal.record_started(numbered(n))
        journal.record_applied(numbered(n))
        n += 1


if __name__ == "__main__":
    main(Path(sys.argv[1]))
