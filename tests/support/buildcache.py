"""A directory built once and kept across test runs and clones of the repository, outside
them (the Debian root of tests/support/packages.py takes minutes to build and changes only
with what goes into it).

An entry is named by a hash of its inputs (which must include the builder's code), so a change
to any of them builds a new entry beside the old one. It is built under a temporary name and
renamed into place only once the build returned, so a build killed half-way never leaves an
entry a later run trusts; a lock makes concurrent runs (pytest-xdist workers, two checkouts)
build it once between them, and the next build clears what a killed one left; building one
removes the entries of the same name unused for UNUSED_DAYS. Callers must never write into an
entry: mount an overlay of it (tests/support/packages.py:overlay).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

# NODEAGENT_TEST_CACHE moves it; removing the directory (as root) clears it.
CACHE = Path(os.environ.get("NODEAGENT_TEST_CACHE", "/var/cache/nodeagent-tests"))
PARTIAL = ".partial-"  # prefix of an entry being built (or left by a killed build)
# An entry of the same name unused this long is removed when another is built: what a change
# of inputs left behind (a checkout of older code that still wants it builds it again).
UNUSED_DAYS = 14
KEY = re.compile(r"[0-9a-f]{16}")  # an entry's name: NAME-KEY


def entry_key(name: str, inputs: Mapping[str, str]) -> str:
    """name-HASH, HASH covering every input by name."""
    digest = hashlib.sha256(json.dumps(dict(inputs), sort_keys=True).encode()).hexdigest()
    return f"{name}-{digest[:16]}"  # KEY


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def remove_tree(path: Path) -> None:
    """rm -rf path, first unmounting anything a killed build left mounted inside it (a
    debootstrap mounts /proc and /sys into its target), never crossing into another file
    system."""
    inside = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    for point in sorted((p for p in points if p.startswith(inside)), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def cached_dir(name: str, inputs: Mapping[str, str], build: Callable[[Path], None],
               cache: Path | None = None) -> Path:
    """The entry for (name, inputs) under cache (default CACHE): built by build(path) into a
    fresh directory path if no complete entry exists yet, else reused as it is."""
    cache = cache or CACHE
    cache.mkdir(parents=True, exist_ok=True)
    key = entry_key(name, inputs)
    entry = cache / key
    if entry.is_dir():  # complete: only a finished build is ever renamed here
        os.utime(entry)  # used now
        return entry
    with _locked(cache / f"{key}.lock"):
        if entry.is_dir():  # built by another process while this one waited for the lock
            return entry
        for left in cache.glob(f"{PARTIAL}{key}-*"):  # a killed build's: the lock is ours
            remove_tree(left)
        partial = cache / f"{PARTIAL}{key}-{os.getpid()}"
        partial.mkdir()
        try:
            build(partial)
        except BaseException:
            remove_tree(partial)
            raise
        (partial / "inputs.json").write_text(json.dumps(dict(inputs), indent=1, sort_keys=True))
        os.sync()  # the entry's files on disk before its name says it is complete
        partial.rename(entry)
    _remove_unused(cache, name, keep=entry)
    return entry


def _remove_unused(cache: Path, name: str, keep: Path) -> None:
    """Remove the entries of name other than keep unused for UNUSED_DAYS, each under its lock
    (so none is removed while another run builds it)."""
    for other in cache.glob(f"{name}-*"):
        if other == keep or not other.is_dir() or not KEY.fullmatch(other.name[len(name) + 1:]):
            continue
        with _locked(cache / f"{other.name}.lock"):
            if other.is_dir() and time.time() - other.stat().st_mtime > UNUSED_DAYS * 86400:
                remove_tree(other)
