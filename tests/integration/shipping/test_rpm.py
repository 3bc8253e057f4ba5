"""The .rpms as rpm sees them (`rpm -qpil --scripts`): files, config files, scriptlets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.packages import Packages
from tests.support.requirements import require_binary

pytestmark = pytest.mark.integration
SCRIPTLETS = {"preinstall": "preinst", "postinstall": "postinst", "preuninstall": "prerm",
              "postuninstall": "postrm"}


def rpm_query(package: Path, *args: str) -> str:
    result = subprocess.run([require_binary("rpm"), "-qp", *args, str(package)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def scriptlets(text: str) -> dict[str, str]:
    """`rpm --scripts` output split into {"postinstall": body, ...}."""
    parts = re.split(r"^(\w+) scriptlet \(using /bin/sh\):\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].rstrip("\n") for i in range(1, len(parts), 2)}


def deb_scripts(deb: Path, tmp_path: Path) -> dict[str, str]:
    control = tmp_path / deb.name
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    return {p.name: p.read_text().rstrip("\n") for p in control.iterdir()
            if p.name in SCRIPTLETS.values()}


@pytest.mark.parametrize(("name", "files"), [
    ("nodeagent", ["/opt/nodeagent/nodeagent", "/opt/nodeagent/_internal/libpython3",
                   "/usr/bin/nodeagent", "/usr/lib/systemd/system/nodeagent.service",
                   "/etc/nodeagent/config.yaml"]),
    ("coordinator", ["/opt/coordinator/coordinator", "/opt/coordinator/_internal/libpython3",
                     "/usr/bin/coordinator", "/usr/lib/systemd/system/coordinator.service",
                     "/etc/coordinator/coordinator.env"]),
])
def test_the_rpm_holds_the_bundle_the_unit_and_a_kept_config(
    packages: Packages, name: str, files: list[str], tmp_path: Path
) -> None:
    package = packages.rpm[name]
    listing = rpm_query(package, "-il", "--scripts")
    info = dict(re.findall(r"^(\w[\w ]*?)\s*: (.*)$", listing, re.M))
    assert info["Name"] == name and info["Version"] == packages.version
    paths = listing.splitlines()
    for wanted in files:
        assert any(p.startswith(wanted) for p in paths), f"{wanted} not in the rpm"
    # noreplace: an edited config file survives upgrades (rpm writes .rpmnew beside it).
    flags = rpm_query(package, "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]")
    config = files[-1]
    assert f"cn {config}" in flags.splitlines(), flags
    # The same maintainer scripts as the .deb's, which the dpkg tests run for real.
    rpm_scripts = scriptlets(rpm_query(package, "--scripts"))
    assert all(f"{kind} scriptlet" in listing for kind in rpm_scripts)
    expected = deb_scripts(packages.deb[name], tmp_path)
    assert {SCRIPTLETS[k]: v for k, v in rpm_scripts.items()} == expected
    assert "systemctl --no-reload enable" in rpm_scripts["postinstall"]
