"""The .deb and .rpm packages as `make packages` builds them, and a minimal Debian root made
by debootstrap (no python3 in it) to install them into with dpkg, as on a fresh node.

debootstrap fetches from the mirror apt on this machine uses, for this machine's release;
the root is built once per machine and kept outside the clone (tests/support/buildcache.py),
and each test gets a copy-on-write overlay of it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.buildcache import cached_dir
from tests.support.requirements import require_binary, require_root

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Packages:
    version: str
    deb: dict[str, Path]  # package name -> .deb
    rpm: dict[str, Path]


def build_packages(dist: Path, version: str | None = None, reuse_bundles: bool = False
                   ) -> Packages:
    """Run packaging/build.sh (what `make packages` runs) into dist."""
    require_binary("dpkg-deb")
    env = {**os.environ, "DIST": str(dist)}
    if version:
        env["VERSION"] = version
    argv = ["bash", str(REPO / "packaging/build.sh")]
    if reuse_bundles:
        argv.append("--reuse-bundles")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"make packages failed:\n{result.stdout}\n{result.stderr}"
    debs = {p.name.split("_")[0]: p for p in dist.glob("*.deb")}
    rpms = {p.name.rsplit("-", 2)[0]: p for p in dist.glob("*.rpm")}
    assert set(debs) == set(rpms) == {"nodeagent", "coordinator"}, sorted(dist.iterdir())
    found = {p.name.split("_")[1] for p in debs.values()}
    assert len(found) == 1, found
    return Packages(found.pop(), debs, rpms)


def _codename() -> str:
    text = Path("/etc/os-release").read_text()
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    assert match, "/etc/os-release names no VERSION_CODENAME"
    return match.group(1)


def apt_mirror(sources_dir: Path = Path("/etc/apt")) -> tuple[str, str]:
    """(URI, suite) of the Debian mirror apt uses for this machine's release."""
    suite = _codename()
    files = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split() and \
                        suite in fields.get("Suites", "").split():
                    return fields["URIs"].split()[0], suite
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1], suite
    raise AssertionError(f"apt has no deb source for {suite} under {sources_dir}")


# What goes into the Debian root besides minbase: systemd and sshd, so that it can be booted
# as an SSH host (tests/support/nspawn.py).
INCLUDE = "systemd,systemd-sysv,dbus,openssh-server"


def debootstrap(target: Path, uri: str, suite: str) -> None:
    """A minbase Debian root at target: dpkg, apt, coreutils and INCLUDE; no python3."""
    log = target.with_suffix(".log")
    with log.open("wb") as out:
        result = subprocess.run([require_binary("debootstrap"), "--variant=minbase",
                                 f"--include={INCLUDE}", suite, str(target), uri],
                                stdout=out, stderr=subprocess.STDOUT, check=False)
    assert result.returncode == 0, f"debootstrap failed: {log.read_text()[-3000:]}"


def pristine_root() -> Path:
    """The pristine Debian root of this machine's release and mirror, built on first use and
    then reused by every run (keyed by the suite, the mirror, the packages, debootstrap's
    version and the code above). Never write into it: overlay() it."""
    require_root()
    binary = require_binary("debootstrap")
    uri, suite = apt_mirror()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    inputs = {"suite": suite, "mirror": uri, "include": INCLUDE, "debootstrap": version,
              "builder": inspect.getsource(debootstrap)}
    entry = cached_dir("debian-root", inputs,
                       lambda where: debootstrap(where / "root", uri, suite))
    return entry / "root"


@contextlib.contextmanager
def read_only(source: Path, mountpoint: Path) -> Iterator[Path]:
    """source, read-only, at mountpoint (a bind mount): a test that wrote into the cached
    root would change every later run's."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(mountpoint)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mountpoint)], check=True)
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


@contextlib.contextmanager
def overlay(lower: Path, where: Path, mountpoint: Path | None = None) -> Iterator[Path]:
    """A writable copy-on-write view of lower at mountpoint (default where/merged), its
    changes kept in where; lower is never changed."""
    merged = mountpoint or where / "merged"
    for path in (where / "upper", where / "work", merged):
        path.mkdir(parents=True, exist_ok=path == merged)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={lower},upperdir={where}/upper,workdir={where}/work", str(merged)],
                   check=True)
    try:
        yield merged
    finally:
        subprocess.run(["umount", "-l", str(merged)], check=False)


def in_root_argv(root: Path, argv: Sequence[str]) -> list[str]:
    """argv chrooted into root, in its own mount and PID namespaces with a /proc of its own,
    so the machine's processes and mounts stay out of it; all of it dies with the unshare."""
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", f"--mount-proc={root}/proc",
            "chroot", str(root), *argv]


def in_root(root: Path, argv: Sequence[str], timeout: float = 120,
            **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(in_root_argv(root, argv), capture_output=True, text=True,
                          timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]
