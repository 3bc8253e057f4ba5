"""The systemd units as the packages install them, checked by systemd's own tools against
the packaged bundles (ExecStart must name a real executable)."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

import pytest

from nodeagent.wire.config import DEFAULT_CONFIG_PATH, AgentConfig
from tests.support.packages import Packages
from tests.support.requirements import require_binary, require_root

pytestmark = pytest.mark.integration
UNITS = "usr/lib/systemd/system"
# Restart backoff keys systemd learnt in 254; older ones ignore them, saying so.
NEWER_KEYS = ("RestartSteps", "RestartMaxDelaySec")


@pytest.fixture(scope="module")
def installed(packages: Packages, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both .debs unpacked into one tree, as on a machine that has them installed."""
    root = tmp_path_factory.mktemp("installed")
    for deb in packages.deb.values():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def analyze(installed: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """systemd-analyze with the packaged /opt in place of the machine's (own mount namespace)."""
    require_root()
    require_binary("systemd-analyze")
    return subprocess.run(["unshare", "--mount", "sh", "-c",
                           'mount --bind "$0/opt" /opt && exec systemd-analyze "$@"',
                           str(installed), *args], capture_output=True, text=True, check=False)


def systemd_version() -> int:
    out = subprocess.run(["systemctl", "--version"], capture_output=True, text=True).stdout
    return int(out.split()[1])


def unit(installed: Path, name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(installed / UNITS / name)
    return parser


def test_systemd_analyze_verify_passes_for_both_units(installed: Path) -> None:
    result = analyze(installed, "verify", f"{installed}/{UNITS}/nodeagent.service",
                     f"{installed}/{UNITS}/coordinator.service")
    problems = result.stderr.splitlines() + result.stdout.splitlines()
    if systemd_version() < 254:
        problems = [line for line in problems
                    if not re.search(rf"Unknown key '({'|'.join(NEWER_KEYS)})'", line)]
    assert result.returncode == 0 and problems == [], result.stderr


def test_the_coordinator_runs_sandboxed_as_its_own_user(installed: Path) -> None:
    result = analyze(installed, "security", "--offline=true", "--no-pager",
                     f"{installed}/{UNITS}/coordinator.service")
    assert result.returncode == 0, result.stderr
    exposure = re.search(r"Overall exposure level for coordinator.service: ([\d.]+) (\w+)",
                         result.stdout)
    assert exposure, result.stdout
    assert float(exposure.group(1)) <= 2.0, result.stdout  # systemd calls up to 2.0 "OK"
    for setting in ("User=/DynamicUser=", "NoNewPrivileges=", "PrivateTmp=", "ProtectSystem=",
                    "ProtectHome="):
        line = next(x for x in result.stdout.splitlines() if setting in x)
        assert line.lstrip().startswith("✓"), line


def test_the_units_use_the_directories_the_programs_default_to(installed: Path) -> None:
    agent = unit(installed, "nodeagent.service")["Service"]
    assert agent["Type"] == "notify" and agent["WatchdogSec"] and agent["Restart"] == "always"
    assert f"/var/lib/{agent['StateDirectory']}" == AgentConfig().state_dir
    assert f"/etc/{agent['ConfigurationDirectory']}" == str(Path(DEFAULT_CONFIG_PATH).parent)
    assert f"--config {DEFAULT_CONFIG_PATH}" in agent["ExecStart"]
    coordinator = unit(installed, "coordinator.service")["Service"]
    assert f"--data-dir /var/lib/{coordinator['StateDirectory']} " in coordinator["ExecStart"]
    assert "$COORDINATOR_ARGS" in coordinator["ExecStart"]
    assert (installed / "etc/coordinator/coordinator.env").read_text().count(
        "\nCOORDINATOR_ARGS=") == 1
