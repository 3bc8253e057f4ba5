"""The doubles' shared state (the cluster as kubeadm keeps it, tests/support/k8s_doubles) stays
whole when a save is cut half-way, as when a double is killed while saving (a kubelet
restarted, an item timed out): an empty state.json, left by a save cut between truncating the
file and writing it, failed every later kubeadm call of a loaded run with a JSON error, and
the kubeadm e2e with it. A full disk cuts the save here at a known point."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.k8s_doubles.common import state
from tests.support.requirements import require_root


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB file system."""
    require_root()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_save_cut_half_way_leaves_the_last_whole_state(small_disk: Path) -> None:
    with state(small_disk) as data:
        data["tokens"] = ["abcdef.0123456789abcdef"]
    with pytest.raises(OSError), state(small_disk) as data:  # does not fit: cut half-way
        data["tokens"] = ["t" * 64] * 2000
    with state(small_disk) as data:
        assert data == {"tokens": ["abcdef.0123456789abcdef"]}
