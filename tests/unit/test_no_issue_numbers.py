"""Product code says what it does and why, never which issue asked for it: an issue number
means nothing to a reader of the code, and the history keeps it anyway (git log names them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("coordinator", "nodeagent")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)

def naming_issues(root: Path) -> set[str]:
    """The files of both packages (any text: code, the dashboard) that name an issue."""
    return {path.relative_to(root).as_posix()
            for package in PACKAGES for path in (root / package).rglob("*")
            if path.is_file() and path.suffix in {".py", ".js", ".html", ".css", ".md"}
            and ISSUE.search(path.read_text(encoding="utf-8"))}


def test_no_product_file_names_an_issue() -> None:
    found = naming_issues(ROOT)
    assert found == set(), "name what the code does, not the issue that asked for it"
