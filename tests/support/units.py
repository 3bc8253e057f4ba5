"""The systemd units the packages ship, as tests and bench scripts read them: a coordinator
started here runs under the descriptor limit its unit gives it in production."""

from __future__ import annotations

import configparser
import resource
from pathlib import Path

UNITS = Path(__file__).resolve().parents[2] / "systemd"


def service_section(name: str, units: Path = UNITS) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(units / name)
    return parser["Service"]


def coordinator_descriptors(units: Path = UNITS) -> int:
    """coordinator.service's LimitNOFILE (its soft limit when it gives soft:hard); systemd's
    default soft limit, 1,024, when it sets none."""
    section = service_section("coordinator.service", units)
    return int(section.get("LimitNOFILE", "1024").split(":")[0])


def under_coordinator_limits(units: Path = UNITS) -> tuple[str, ...]:
    """A command prefix running a program with the descriptor limit of coordinator.service (in
    units: another revision's), or this process's hard limit if lower (an unprivileged
    process cannot raise it)."""
    limit = min(coordinator_descriptors(units), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    return ("prlimit", f"--nofile={limit}:{limit}")
