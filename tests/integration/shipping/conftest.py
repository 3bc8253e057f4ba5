"""Session-wide: the packages, built once, and a pristine minimal Debian root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.nspawn import Container, booted
from tests.support.packages import Packages, build_packages, debootstrap, overlay


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Packages:
    return build_packages(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def debian_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return debootstrap(tmp_path_factory.mktemp("debootstrap") / "root")


@pytest.fixture
def node_root(debian_root: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh node: a writable overlay of the pristine Debian root."""
    with overlay(debian_root, tmp_path / "node") as merged:
        yield merged


@pytest.fixture
def box(node_root: Path, tmp_path: Path) -> Iterator[Container]:
    """The fresh node booted, systemd as PID 1, in a network namespace of its own."""
    with booted(node_root, tmp_path / "nspawn.log") as container:
        yield container
