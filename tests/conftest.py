"""Shared test plumbing. Under CI=true a required component that is missing fails the test,
and any skipped integration or e2e test fails the session: CI never goes green by skipping."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.postgres import Postgres

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_REQUIRED_DIRS = ("integration", "e2e")
_skipped_required: list[str] = []


def require_binary(name: str) -> str:
    """Path of a real component's binary; fail under CI, skip elsewhere, when it is missing."""
    path = shutil.which(name) or next(
        (f"{d}/{name}" for d in ("/usr/sbin", "/sbin") if os.access(f"{d}/{name}", os.X_OK)), None
    )
    if path is None:
        message = f"{name} is not installed (see scripts/system-packages.txt)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        message = "needs root (network namespaces)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


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


class RootTree:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write(self, machine_path: str, text: str = "", mode: int | None = None) -> Path:
        target = self.path / machine_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if mode is not None:
            target.chmod(mode)
        return target

    def mkdir(self, machine_path: str) -> Path:
        target = self.path / machine_path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        return target


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
