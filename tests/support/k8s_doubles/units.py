"""systemd's part for the services the kubeadm profile writes a unit for (an
/etc/systemd/system/NAME.service under the node's root: kube-apiserver-proxy, the local
haproxy). `systemctl start|restart|reload|reload-or-restart|stop NAME` and `enable|disable
--now NAME` run what the unit itself says (ExecStartPre, ExecStart, ExecReload with $MAINPID),
with the real binaries it names (found on PATH by their base name: Debian's haproxy) and every
other absolute path under the node's root, in the node's network namespace, as a detached
process that control.stop_all stops. As with systemd, a start whose ExecStartPre fails or whose
ExecStart exits at once fails, and a reload of a unit that does not run is refused."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

from tests.support.k8s_doubles.common import (
    Failure,
    local,
    node_key,
    running,
    spawn,
    state_dir,
    stop,
)

STARTED_SECONDS = 0.5  # how long ExecStart must keep running to count as started


def unit_file(name: str) -> Path:
    return local(f"/etc/systemd/system/{name.removesuffix('.service')}.service")


def known(name: str) -> bool:
    """Whether the profile wrote a unit of this name on this node."""
    return unit_file(name).exists()


def directives(name: str) -> dict[str, list[str]]:
    """The unit's [Service] directives, each with every value it was given, in order."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in unit_file(name).read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def command(line: str, pid: int | None = None) -> list[str]:
    """An Exec line as it runs here: the real binary by its base name, $MAINPID filled in, and
    every other absolute path under the node's root."""
    words = shlex.split(line.replace("$MAINPID", str(pid or "")))
    binary = shutil.which(Path(words[0]).name)
    if binary is None:
        raise Failure(f"Failed to locate executable {words[0]}: No such file or directory")
    return [binary, *(str(local(w)) if w.startswith("/") else w for w in words[1:])]


def process(name: str) -> str:
    return f"{node_key()}-unit-{name.removesuffix('.service')}"


def run_all(name: str, key: str, pid: int | None = None) -> None:
    for line in directives(name).get(key, []):
        done = subprocess.run(command(line, pid), capture_output=True, text=True, check=False,
                              timeout=30)
        if done.returncode:
            raise Failure(f"Job for {name}.service failed because the control process exited "
                          f"with error code ({key}: {(done.stdout + done.stderr).strip()})")


def start(name: str) -> int:
    """ExecStartPre, then ExecStart detached; its pid, once it kept running."""
    found = running(process(name))
    if found is not None:
        return found
    run_all(name, "ExecStartPre")
    local("/run").mkdir(parents=True, exist_ok=True)
    log = state_dir() / "logs" / f"{process(name)}.log"
    pid = spawn(process(name), command(directives(name)["ExecStart"][0]), log)
    time.sleep(STARTED_SECONDS)
    if running(process(name)) is None:
        raise Failure(f"Job for {name}.service failed because the control process exited with "
                      f"error code ({log.read_text(errors='replace').strip()[-500:]})")
    return pid


def reload(name: str) -> int:
    pid = running(process(name))
    if pid is None:
        raise Failure(f"{name}.service is not active, cannot reload.")
    run_all(name, "ExecReload", pid)
    return pid


def act(verb: str, name: str, now: bool) -> int | None:
    """`systemctl VERB NAME` (now: --now); the main process's pid while it runs."""
    if verb in ("stop", "disable") and (verb == "stop" or now):
        stop(process(name))
        return None
    if verb == "restart":
        stop(process(name))
    if verb == "reload":
        return reload(name)
    if verb == "reload-or-restart" and running(process(name)) is not None:
        return reload(name)
    if verb in ("start", "restart", "reload-or-restart") or (verb == "enable" and now):
        return start(name)
    return running(process(name))
