"""Real components a test needs (a binary, root for network namespaces): missing, the test is
skipped on a developer's machine and fails under CI=true, where nothing may go green by
skipping."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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
