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
