"""Shared test plumbing. Under CI=true a required component that is missing fails the test,
and any skipped integration or e2e test fails the session: CI never goes green by skipping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.requirements import IN_CI
from tests.support.roots import RootTree

if TYPE_CHECKING:
    from tests.support.postgres import Postgres

_REQUIRED_DIRS = ("integration", "e2e")
_skipped_required: list[str] = []


# Under pytest-xdist with `--dist loadfile` (scripts/test.sh), tests/support/scheduling.py makes
# each file one work unit, and every shipping test one with them; the workers collect the
# slow tiers first so that no long test is handed out last.
_TIERS = ("tests/integration/shipping/", "tests/e2e/", "tests/integration/")


def _tier(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(_TIERS) if item.nodeid.startswith(prefix)),
                len(_TIERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        items.sort(key=_tier)  # stable: the order within each tier stays


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist") != "loadfile":
        return None
    from tests.support.scheduling import FileOrShippingScheduling

    return FileOrShippingScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and any(f"tests/{d}/" in report.nodeid for d in _REQUIRED_DIRS):
        _skipped_required.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if IN_CI and _skipped_required:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if IN_CI and _skipped_required:
        terminalreporter.write_line(
            "CI=true: required integration tests were skipped, failing the run: "
            + ", ".join(_skipped_required),
            red=True,
        )


@pytest.fixture
def root_tree(tmp_path: Path) -> RootTree:
    """A fake machine root: write files into it with root_tree.write('/etc/x', 'text')."""
    return RootTree(tmp_path / "root")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One PostgreSQL server for the whole session (tests take a database each from it)."""
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server


