"""The kubeadm profile's containerd configuration, written as a machine's agent writes it, loaded
by a real containerd (Debian's 1.6) in a network namespace of its own, with its root, state and
socket in a temp dir: the daemon must start and load its CRI plugin.

containerd 1.6 refuses a configuration it cannot parse or decode (a string where a number
belongs), but it takes a `version` it does not know as 2 and ignores keys and plugin sections it
does not know: a misspelt `SystemdCgroup`, or a `version = 3` file's `io.containerd.cri.v1.*`
sections, leave the kubelet and containerd on different cgroup drivers without a word. So the
test also reads back, from `containerd config dump`, the settings the profile means containerd
to take; the broken variants below show each way the check fails."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.views.fleet import Fleet, hypothetical_fleet
from tests.support.kubeadm_profile import profile_spec, rendered, write_file_item
from tests.support.netns import Namespace, namespace
from tests.support.process import serving
from tests.support.requirements import require_binary

CRI = "io.containerd.grpc.v1.cri"
# The pause image kubeadm 1.33 pulls and checks the runtime's sandbox image against.
PAUSE = "registry.k8s.io/pause:3.10"


def refusal(ns: Namespace, config: Path, tmp: Path) -> str | None:
    """Why containerd refuses config, or does not take from it what the profile means it to
    set; None when it starts with it, its CRI plugin loaded, and took every setting."""
    containerd, ctr = require_binary("containerd"), require_binary("ctr")
    socket = tmp / "state/containerd.sock"
    # A tmpfs on /opt in the namespace's own mounts: the opt plugin creates /opt/containerd.
    argv = ns.argv(["sh", "-c", 'mount -t tmpfs tmpfs /opt && exec "$@"', "sh", containerd,
                    "--config", str(config), "--root", str(tmp / "root"),
                    "--state", str(tmp / "state"), "--address", str(socket)])

    def plugins() -> str:
        if not socket.exists():
            return ""
        listed = subprocess.run(ns.argv([ctr, "--address", str(socket), "--connect-timeout",
                                         "2s", "plugins", "ls"]),
                                capture_output=True, text=True, check=False, timeout=10)
        return listed.stdout if listed.returncode == 0 else ""

    try:
        with serving(argv, tmp / "containerd.log", plugins, "containerd"):
            listed = plugins()
    except AssertionError as failed:
        return f"containerd did not start: {failed}"
    (status,) = [line.split()[-1] for line in listed.splitlines() if line.split()[1:2] == ["cri"]]
    if status != "ok":
        return f"the CRI plugin is {status}: {(tmp / 'containerd.log').read_text()}"
    dump = subprocess.run([containerd, "--config", str(config), "config", "dump"],
                          capture_output=True, text=True, check=True, timeout=10).stdout
    return unmet(tomllib.loads(dump))


def unmet(taken: dict[str, Any]) -> str | None:
    """The first setting containerd's effective configuration does not hold as the profile
    means it, or None."""
    cri = taken["plugins"][CRI]
    runc = cri["containerd"]["runtimes"].get("runc", {})
    wanted: list[tuple[str, object, object]] = [
        ("version", taken["version"], 2),
        ("the default runtime", cri["containerd"]["default_runtime_name"], "runc"),
        ("runc's runtime_type", runc.get("runtime_type"), "io.containerd.runc.v2"),
        ("runc's SystemdCgroup", runc.get("options", {}).get("SystemdCgroup"), True),
        ("sandbox_image", cri["sandbox_image"], PAUSE),
    ]
    return next((f"{name} is {got!r}, not {want!r}" for name, got, want in wanted
                 if got != want), None)


def profile_config(tmp: Path) -> str:
    """The configuration's text, as every machine of a fleet gets it (all the same)."""
    spec = profile_spec()
    machines = hypothetical_fleet(spec, Fleet(1, 1))
    texts = set()
    for machine in machines:
        root = tmp / machine.id
        write_file_item(rendered(spec, machine, machines, "prepare")["containerd-config"], root)
        texts.add((root / "etc/containerd/config.toml").read_text())
    (text,) = texts
    return text


def test_containerd_starts_with_the_profiles_configuration_and_takes_its_settings(
        tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(profile_config(tmp_path))
    with namespace() as ns:
        assert refusal(ns, config, tmp_path) is None


@pytest.mark.parametrize(("broken", "why"), [
    (("SystemdCgroup", "SystemdCgrop"), "runc's SystemdCgroup is None"),  # ignored
    (("grpc.v1.cri", "grpc.v1.cir"), "runc's SystemdCgroup is False"),  # an unknown plugin
    (("version = 2", "version = 3"), "runc's SystemdCgroup is False"),
    (('"io.containerd.runc.v2"', "2"), "Can't convert 2(int64) to string"),  # refused
    (("version = 2", "version = [2"), "did not start"),
])
def test_a_configuration_containerd_refuses_or_ignores_fails_the_check(
        tmp_path: Path, broken: tuple[str, str], why: str) -> None:
    config = tmp_path / "config.toml"
    text = profile_config(tmp_path)
    if broken[1] == "version = 3":  # what a version 3 (containerd 2.x) file names the plugin
        text = text.replace(f'"{CRI}".containerd', '"io.containerd.cri.v1.runtime".containerd')
    config.write_text(text.replace(*broken))
    with namespace() as ns:
        assert why in (refusal(ns, config, tmp_path) or "")
