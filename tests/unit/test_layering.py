"""The layering in .importlinter holds, and the check that says so can fail.

`lint-imports` runs as a subprocess over the checkout (so CI fails on an import against the
layering), then over copies of the tree with one wrong import each, where it must name the
contract that import breaks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ".importlinter"
LAYERS = "The coordinator in layers: an upper layer may import a lower one, never the reverse"
AGENT_BELOW = "The agent is a lower layer: it never imports the coordinator"
WIRE_ONLY = ("The coordinator imports nothing of the agent but its wire package, which imports "
             "nothing else of it")
PURE_DOMAIN = "What claims to be pure is: no event loop, I/O, web, CLI or storage library"
LEAN_DAEMON = "The agent daemon never imports pydantic or yaml (its child processes do)"
ACYCLIC = "No import cycles between sibling modules, at any depth"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Runs lint-imports from the test environment over the packages under `root`."""
    command = Path(sys.executable).with_name("lint-imports")
    # A wide terminal keeps each contract's verdict on one line of the report.
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "500"}
    return subprocess.run([str(command), CONTRACTS, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def broken_contracts(report: str) -> set[str]:
    """The names of the contracts the report calls broken ("NAME BROKEN (2 ignored imports)")."""
    return set(re.findall(r"^(.+) BROKEN(?: \(.*\))?$", report, re.MULTILINE))


def test_the_checkout_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@dataclass(frozen=True)
class WrongImport:
    module: str  # a path relative to the checkout, created if missing
    line: str
    breaks: str


WRONG_IMPORTS = {
    "domain imports the service": WrongImport("coordinator/domain/errors.py",
                                              "import coordinator.service", LAYERS),
    "a new module outside every layer": WrongImport("coordinator/stray.py", "import json", LAYERS),
    "the agent imports the coordinator": WrongImport("nodeagent/prechecktable.py",
                                                     "import coordinator.domain", AGENT_BELOW),
    "the service imports the agent's client": WrongImport("coordinator/service/agents.py",
                                                          "import nodeagent.client", WIRE_ONLY),
    "the domain imports the agent's package": WrongImport("coordinator/domain/model.py",
                                                          "from nodeagent import __version__",
                                                          WIRE_ONLY),
    "the wire imports the agent's client": WrongImport("nodeagent/wire/endpoint.py",
                                                       "import nodeagent.client", WIRE_ONLY),
    "domain imports aiohttp": WrongImport("coordinator/domain/ratelimit.py", "import aiohttp", PURE_DOMAIN),
    "domain imports asyncio": WrongImport("coordinator/domain/records.py", "import asyncio", PURE_DOMAIN),
    "the daemon imports yaml": WrongImport("nodeagent/daemon.py", "import yaml", LEAN_DAEMON),
    "the daemon pulls pydantic in": WrongImport("nodeagent/daemon.py", "import nodeagent.wire.protocol",
                                                LEAN_DAEMON),
    "the wire package's __init__ pulls pydantic in": WrongImport(
        "nodeagent/wire/__init__.py", "import nodeagent.wire.protocol", LEAN_DAEMON),
    "a cycle inside the domain": WrongImport("coordinator/domain/model.py",
                                             "import coordinator.domain.status", ACYCLIC),
}


@pytest.mark.parametrize("case", WRONG_IMPORTS.values(), ids=WRONG_IMPORTS.keys())
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, case: WrongImport) -> None:
    for package in ("coordinator", "nodeagent"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / CONTRACTS, tmp_path / CONTRACTS)
    module = tmp_path / case.module
    module.write_text((module.read_text() if module.exists() else "") + f"\n{case.line}\n")

    result = lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert case.breaks in broken_contracts(result.stdout), result.stdout
