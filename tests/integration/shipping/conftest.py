"""Session-wide: the packages, built once, and a pristine minimal Debian root (built once per
machine: tests/support/buildcache.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.nspawn import Container, booted
from tests.support.packages import Packages, build_packages, overlay, pristine_root, read_only

# The build keeps a core busy for about a minute, a first debootstrap on a machine mostly
# waits on the mirror and the disk: the first shipping test to need either starts both side
# by side (those that the session's tests need), each once.
_MAKERS: dict[str, Callable[[Path], Any]] = {
    "packages": build_packages,
    "debian_root": lambda _where: pristine_root(),
}


@pytest.fixture(scope="session")
def _shipping_inputs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[dict[str, Future[Any]]]:
    needed = sorted({name for item in request.session.items
                     for name in getattr(item, "fixturenames", ()) if name in _MAKERS})
    with ThreadPoolExecutor(len(_MAKERS)) as pool:
        yield {name: pool.submit(_MAKERS[name], tmp_path_factory.mktemp(name)) for name in needed}


@pytest.fixture(scope="session")
def packages(_shipping_inputs: dict[str, Future[Any]]) -> Packages:
    return _shipping_inputs["packages"].result()


@pytest.fixture(scope="session")
def debian_root(_shipping_inputs: dict[str, Future[Any]],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cached Debian root, read-only: tests overlay it."""
    with read_only(_shipping_inputs["debian_root"].result(),
                   tmp_path_factory.mktemp("debian_root") / "root") as root:
        yield root


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
