"""Unit-test fixtures shared by the check tests and the CLI tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.roots import BindSocket


@pytest.fixture
def bind_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[BindSocket]:
    """Create a listening unix socket at a path in a tree. The socket is bound by a name
    relative to its directory: temp paths easily exceed the 108 bytes bind() takes."""
    opened: list[socket.socket] = []

    def bind(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        opened.append(sock)
        with monkeypatch.context() as patch:
            patch.chdir(path.parent)
            sock.bind(path.name)
        sock.listen()

    yield bind
    for sock in opened:
        sock.close()
