"""The cache that keeps the Debian root across runs (tests/support/buildcache.py): an entry is
built once and reused, and those unused for two weeks are removed; a build killed half-way
(with a mount left inside it, as a killed debootstrap leaves /proc) is never trusted, and
clearing it touches nothing outside it; runs that need the entry at once build it once
between them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.buildcache import UNUSED_DAYS, cached_dir, remove_tree
from tests.support.requirements import require_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
INPUTS = {"suite": "bookworm", "builder": "v1"}


def build(name: str, count: Path, outside: Path | None = None, hang: bool = False
          ) -> subprocess.Popen[bytes]:
    """Another process asking the cache for the entry, whose build counts itself in count,
    writes half the entry, then (hang) mounts outside into it and never finishes."""
    code = (
        "import sys, time, subprocess, pathlib\n"
        "from tests.support.buildcache import UNUSED_DAYS, cached_dir, remove_tree\n"
        "cache, count, outside, hang = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]),"
        " sys.argv[3], sys.argv[4] == '1'\n"
        "def builder(where):\n"
        "    with count.open('a') as f: f.write('built\\n')\n"
        "    (where / 'half').write_text('half')\n"
        "    if outside:\n"
        "        (where / 'proc').mkdir()\n"
        "        subprocess.run(['mount', '--bind', outside, str(where / 'proc')], check=True)\n"
        "    time.sleep(3600 if hang else 1)\n"
        "    (where / 'whole').write_text('whole')\n"
        f"cached_dir({name!r}, {INPUTS!r}, builder, cache)\n")
    return subprocess.Popen([sys.executable, "-c", code, str(count.parent / "cache"), str(count),
                             str(outside or ""), "1" if hang else "0"],
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def test_an_entry_is_built_once_and_later_runs_reuse_it(tmp_path: Path) -> None:
    builds: list[Path] = []

    def builder(where: Path) -> None:
        builds.append(where)
        (where / "root").mkdir()

    first = cached_dir("root", INPUTS, builder, tmp_path)
    assert (first / "root").is_dir() and len(builds) == 1
    assert cached_dir("root", INPUTS, builder, tmp_path) == first and len(builds) == 1
    other = cached_dir("root", {**INPUTS, "builder": "v2"}, builder, tmp_path)
    assert other != first and len(builds) == 2  # changed inputs: a new entry


def test_a_failed_build_leaves_nothing_and_the_next_run_builds_again(tmp_path: Path) -> None:
    def failing(where: Path) -> None:
        (where / "half").write_text("half")
        raise AssertionError("the mirror went away")

    with pytest.raises(AssertionError, match="mirror"):
        cached_dir("root", INPUTS, failing, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    entry = cached_dir("root", INPUTS, lambda where: (where / "whole").write_text("w"), tmp_path)
    assert sorted(p.name for p in entry.iterdir()) == ["inputs.json", "whole"]


def test_a_build_killed_half_way_is_never_trusted_and_clearing_it_stays_inside(
    tmp_path: Path,
) -> None:
    require_root()
    outside = tmp_path / "outside"  # stands for the machine's /proc
    outside.mkdir()
    (outside / "keep").write_text("the machine's")
    killed = build("root", tmp_path / "count", outside, hang=True)
    try:
        wait_until(lambda: any((tmp_path / "cache").glob(".partial-*/proc/keep")), 30,
                   "the build half-way, a mount inside it")
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)

        entry = cached_dir("root", INPUTS, lambda where: (where / "whole").write_text("w"),
                           tmp_path / "cache")
        assert sorted(p.name for p in entry.iterdir()) == ["inputs.json", "whole"]  # no "half"
        assert (outside / "keep").read_text() == "the machine's"
        assert not list((tmp_path / "cache").glob(".partial-*"))
    finally:  # nothing left running or mounted, whatever failed
        killed.kill()
        remove_tree(tmp_path / "cache")

def test_runs_that_need_the_entry_at_once_build_it_once(tmp_path: Path) -> None:
    count = tmp_path / "count"
    runs = [build("root", count) for _ in range(3)]
    assert [run.wait(timeout=60) for run in runs] == [0, 0, 0]
    assert count.read_text() == "built\n"
    (entry,) = [p for p in (tmp_path / "cache").glob("root-*") if p.is_dir()]
    assert (entry / "whole").exists()


def test_building_an_entry_removes_those_of_its_name_unused_for_two_weeks(tmp_path: Path) -> None:
    def builder(where: Path) -> None:
        (where / "root").mkdir()

    old = cached_dir("root", {**INPUTS, "builder": "v0"}, builder, tmp_path)
    recent = cached_dir("root", {**INPUTS, "builder": "v1"}, builder, tmp_path)
    other = cached_dir("rootfs", INPUTS, builder, tmp_path)  # another name: not this one's
    weeks_ago = time.time() - (UNUSED_DAYS + 1) * 86400
    for entry in (old, other):
        os.utime(entry, (weeks_ago, weeks_ago))
    cached_dir("root", {**INPUTS, "builder": "v2"}, builder, tmp_path)
    assert not old.exists()
    assert recent.is_dir() and other.is_dir()
