"""What every double shares: how a command fails, where a path it was given is (under the
node's root), the kubeconfig files they write, the cluster's shared state and its clock, the
phase-boundary hooks tests stop or kill a double at, and the detached processes (kubelet,
static pods, etcd) a double leaves running as systemd and the container runtime would."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Flags that take a value (the others are switches): enough for the profile's calls.
VALUED = {"--config", "--ttl", "--description", "--certificate-key", "--kubeconfig", "-o",
          "--output", "-n", "--namespace", "-f", "--filename", "--version", "--set",
          "--ignore-preflight-errors", "--skip-phases", "--name", "--label", "--runtime-endpoint",
          "--node-name", "--apiserver-advertise-address", "--cri-socket", "-l", "--selector"}


class Failure(Exception):
    """The command fails, printing this (exit status 1)."""


def local(path: str) -> Path:
    """Where a path the command was given is: absolute ones under the working directory."""
    return Path.cwd() / path.lstrip("/") if path.startswith("/") else Path(path)


def kubeconfig(user: str, server: str | None = None, ca: str | None = None) -> str:
    """A kubeconfig to server with its CA (certificate-authority-data), or to the test API
    server (admin.conf: the coordinator reaches the test API server directly)."""
    cluster = {"server": server or os.environ["K8S_DOUBLES_API"]}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "kubernetes", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": f"double-{user}-{secrets.token_hex(8)}"}}],
        "contexts": [{"name": user, "context": {"cluster": "kubernetes", "user": user}}]})


def parse(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Positional words, and flags (`--x=v`, `--x v` for VALUED flags, `--switch` as "")."""
    words: list[str] = []
    flags: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            flags[name] = value if eq else next(rest, "") if name in VALUED else ""
        else:
            words.append(arg)
    return words, flags


def state_dir() -> Path:
    directory = Path(os.environ["K8S_DOUBLES_STATE"])
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def state(directory: Path | None = None) -> Iterator[dict[str, Any]]:
    """The shared state (the cluster as kubeadm keeps it), locked while in use, saved after
    whole or not at all (a new file renamed over it): a double killed while saving, as a
    restarted kubelet is, must not leave a torn state that fails every later call."""
    directory = directory or state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "state.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = directory / "state.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        yield data
        saving = path.with_name(f"state.json.{os.getpid()}")
        try:
            saving.write_text(json.dumps(data, indent=1))
            saving.replace(path)
        finally:
            saving.unlink(missing_ok=True)


def now(data: dict[str, Any]) -> float:
    """The cluster's clock: real time moved on by what the test advanced it (control.advance)."""
    return time.time() + float(data.get("clock", 0.0))


def host() -> str:
    return socket.gethostname()


def node_key() -> str:
    """This node (its root, the working directory) as a file name: hostnames repeat across
    tests run in one namespace, roots do not."""
    return f"{host()}-{hashlib.sha256(str(Path.cwd()).encode()).hexdigest()[:8]}"


# -- phase boundaries: K8S_DOUBLES_PAUSE / K8S_DOUBLES_KILL --------------------------------------

def _hooks(kind: str) -> set[str]:
    armed = set(filter(None, os.environ.get(f"K8S_DOUBLES_{kind.upper()}", "").split(",")))
    path = state_dir() / "hooks.json"
    if path.exists():
        armed |= set(json.loads(path.read_text()).get(kind, []))
    return armed


def marker(directory: Path, spec: str) -> Path:
    return directory / "paused" / spec.replace(":", "_").replace("/", "_")


def boundary(workflow: str, phase: str) -> None:
    """After a phase: stop here (a marker with this pid, waiting until the test removes it) or
    die (SIGKILL) when a hook names `<host>:<workflow>:<phase>`. Each hook fires once, so the
    retry a test provokes runs through."""
    spec = f"{host()}:{workflow}:{phase}"
    paused, killed = spec in _hooks("pause"), spec in _hooks("kill")
    if not (paused or killed):
        return
    with state() as data:
        fired = data.setdefault("fired", [])
        if spec in fired:
            return
        fired.append(spec)
    if killed:
        os.kill(os.getpid(), signal.SIGKILL)
    mark = marker(state_dir(), spec)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(str(os.getpid()))
    while mark.exists():
        time.sleep(0.1)


# -- detached processes --------------------------------------------------------------------------

def procs_dir(directory: Path | None = None) -> Path:
    found = (directory or state_dir()) / "procs"
    found.mkdir(parents=True, exist_ok=True)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (our own child) is dead
        if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
            return False
    return True


def running(name: str, directory: Path | None = None) -> int | None:
    """The pid of a detached process this node started under this name, if it still runs."""
    path = procs_dir(directory) / f"{name}.json"
    if not path.exists():
        return None
    pid = int(json.loads(path.read_text())["pid"])
    return pid if alive(pid) else None


def spawn(name: str, argv: Sequence[str], log: Path) -> int:
    """Start argv detached (its own session, in the caller's network namespace), remembered as
    name so that tests stop it at teardown (control.stop_all)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)
    (procs_dir() / f"{name}.json").write_text(json.dumps(
        {"pid": proc.pid, "root": str(Path.cwd()), "host": host(), "argv": list(argv)}))
    return proc.pid


def stop(name: str, directory: Path | None = None) -> None:
    """SIGKILL a detached process (and its session) and forget it."""
    path = procs_dir(directory) / f"{name}.json"
    pid = running(name, directory)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.time() + 5
        while alive(pid) and time.time() < deadline:
            time.sleep(0.02)
    path.unlink(missing_ok=True)
