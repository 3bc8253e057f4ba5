"""The layering in .importlinter holds, and the check that says so can fail.

`lint-imports` runs as a subprocess over the checkout (so CI fails on an import against the
layering), then over copies of the tree with one wrong import each, where it must name the
contract that import breaks. Handlers and commands reach the store only through the service
(or the admin API), but where docs/architecture.md excuses one and says why."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grimp
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
    "domain imports aiohttp": WrongImport("coordinator/edge/ratelimit.py", "import aiohttp", PURE_DOMAIN),
    "domain imports asyncio": WrongImport("coordinator/domain/records.py", "import asyncio", PURE_DOMAIN),
    "the daemon imports yaml": WrongImport("nodeagent/daemon.py", "import yaml", LEAN_DAEMON),
    "the daemon pulls pydantic in": WrongImport("nodeagent/daemon.py", "import nodeagent.wire.protocol",
                                                LEAN_DAEMON),
    "the wire package's __init__ pulls pydantic in": WrongImport(
        "nodeagent/wire/__init__.py", "import nodeagent.wire.protocol", LEAN_DAEMON),
    "a cycle inside the domain": WrongImport("coordinator/domain/model.py",
                                             "import coordinator.domain.views.status", ACYCLIC),
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


# -- who reaches the store -----------------------------------------------------------------------

STORE = "coordinator.store"
EXCUSES = "### Who reaches the store"


def excused_by_the_map(doc: str) -> set[str]:
    """The modules the map's "Who reaches the store" table excuses, as dotted names."""
    section = doc.split(EXCUSES, 1)[1].split("\n#", 1)[0]
    return {"coordinator." + path.removesuffix(".py").replace("/", ".")
            for path in re.findall(r"^\| `((?:api|cli)/\w+\.py)` \|", section, re.MULTILINE)}


def takes_the_store(source: str) -> bool:
    """Whether the source reads a `store` attribute (a handler's service(request).store)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "store"
               for node in ast.walk(ast.parse(source)))


def store_problems(graph: grimp.ImportGraph, handler_sources: Mapping[str, str],
                   excused: set[str]) -> list[str]:
    """A line per handler module that imports the store or takes it off the service, and per
    command module that imports it by any chain, the excused aside (graph is changed)."""
    store = {m for m in graph.modules if m == STORE or m.startswith(STORE + ".")}
    problems = []
    for module in sorted(set(handler_sources) - excused):
        problems += [f"{module} imports {imported}"
                     for imported in sorted(graph.find_modules_directly_imported_by(module) & store)]
        if takes_the_store(handler_sources[module]):
            problems.append(f"{module} takes the store off the service")
    for module in excused & graph.modules:
        graph.remove_module(module)
    for module in sorted(m for m in graph.modules if m.split(".")[:2] == ["coordinator", "cli"]):
        reached = graph.find_upstream_modules(module) & store
        if reached:
            chain = graph.find_shortest_chain(module, min(reached)) or ()
            problems.append(f"{module} reaches the store: {' -> '.join(chain)}")
    return problems


def test_handlers_and_commands_reach_the_store_only_where_the_map_says_why() -> None:
    excused = excused_by_the_map((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert excused, f"docs/architecture.md has no table under {EXCUSES!r}"
    handlers = {f"coordinator.api.{path.stem}": path.read_text(encoding="utf-8")
                for path in (ROOT / "coordinator" / "api").glob("*.py") if path.stem != "__init__"}
    graph = grimp.build_graph("coordinator", "nodeagent", cache_dir=None)
    assert not store_problems(graph, handlers, excused)


def test_a_handler_or_command_that_reaches_the_store_is_named() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("coordinator.api.fine", "coordinator.service.ops"),
                               ("coordinator.api.direct", "coordinator.store.base"),
                               ("coordinator.api.taker", "coordinator.service.ops"),
                               ("coordinator.cli.cmd", "coordinator.service.ops"),
                               ("coordinator.cli.offline", "coordinator.service.ops"),
                               ("coordinator.service.ops", "coordinator.store.base")]:
        graph.add_import(importer=importer, imported=imported)
    handlers = {"coordinator.api.fine": "await service(request).queries.archive(d)",
                "coordinator.api.direct": "import coordinator.store.base",
                "coordinator.api.taker": "await take(service(request).store)"}
    assert store_problems(graph, handlers, {"coordinator.cli.offline"}) == [
        "coordinator.api.direct imports coordinator.store.base",
        "coordinator.api.taker takes the store off the service",
        "coordinator.cli.cmd reaches the store: "
        "coordinator.cli.cmd -> coordinator.service.ops -> coordinator.store.base",
    ]
