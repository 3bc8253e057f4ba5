"""Another revision of this repository, for a bench script to measure side by side with the
worktree: its files exported with `git archive`, and its code first on PYTHONPATH for the
processes started meanwhile (the venv's `coordinator` then runs it), and the working
directory (`python -m`, as the coordinator starts its artifact port's process, puts that
before PYTHONPATH: from this worktree, the old coordinator's child ran this one's code)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def revision(rev: str | None) -> Iterator[Path]:
    """The tree of rev, its code what `coordinator` runs meanwhile; None: this worktree."""
    if rev is None:
        yield REPO
        return
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        before, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
        os.environ["PYTHONPATH"] = tree
        os.chdir(tree)
        try:
            yield Path(tree)
        finally:
            os.chdir(cwd)
            if before is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = before
