"""docs/architecture.md maps every module of both packages, and only modules that exist.

The map drifted within two days once (a third of the coordinator's modules missing, files named
that were gone), so a newcomer who looks a concern up there must be able to trust it: a module
added, moved or removed without its line on the map fails here.

The map is the doc's tables whose first header cell names a package folder in backticks
(`coordinator/domain/`); the first cell of each row names modules relative to that folder
(`planner.py`, `items/runner.py`), several to a row if they share a job."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("coordinator", "nodeagent")
# A map table's header names its folder: "| `coordinator/service/` | owns |".
FOLDER = re.compile(r"`((?:coordinator|nodeagent)/(?:\w+/)*)`")
MODULE = re.compile(r"`([\w/]+\.py)`")


def modules_on_disk(root: Path) -> set[str]:
    """Every module of both packages by its path from the repository root, __init__.py aside."""
    return {path.relative_to(root).as_posix()
            for package in PACKAGES for path in (root / package).rglob("*.py")
            if path.name != "__init__.py"}


def modules_on_map(doc: str) -> set[str]:
    """The modules the map's tables name, by their path from the repository root."""
    named: set[str] = set()
    folder: str | None = None
    in_table = False
    for line in doc.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        first_cell = line.split("|")[1].strip()
        if not in_table:  # a table's first line is its header
            in_table = True
            header = FOLDER.fullmatch(first_cell)
            folder = header.group(1) if header else None
        elif folder is not None:
            named.update(folder + module for module in MODULE.findall(first_cell))
    return named


def map_problems(root: Path, doc: str) -> list[str]:
    """One line per module the map lacks and per module it names that does not exist."""
    on_disk, on_map = modules_on_disk(root), modules_on_map(doc)
    return ([f"{module} is missing from the map" for module in sorted(on_disk - on_map)]
            + [f"{module} is on the map but does not exist" for module in sorted(on_map - on_disk)])


def test_the_map_names_every_module_and_only_modules_that_exist() -> None:
    problems = map_problems(ROOT, DOC.read_text(encoding="utf-8"))
    assert not problems, "docs/architecture.md's module map:\n" + "\n".join(problems)


def test_a_missing_module_and_a_gone_one_are_each_named(tmp_path: Path) -> None:
    for module in ("coordinator/domain/planner.py", "coordinator/domain/fresh.py",
                   "nodeagent/items/runner.py", "nodeagent/__init__.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text('"""A module."""\n', encoding="utf-8")
    doc = ("## domain\n\n| `coordinator/domain/` | one job |\n| --- | --- |\n"
           "| `planner.py`, `gone.py` | plans |\n\n"
           "| module | not a map table |\n| --- | --- |\n| `fresh.py` | prose |\n\n"
           "| `nodeagent/` | one job |\n| --- | --- |\n| `items/runner.py` | runs |\n")
    assert map_problems(tmp_path, doc) == [
        "coordinator/domain/fresh.py is missing from the map",
        "coordinator/domain/gone.py is on the map but does not exist",
    ]
