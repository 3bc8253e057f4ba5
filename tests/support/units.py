"""The systemd units the packages ship, as tests and bench scripts read them: a coordinator
started here runs under the descriptor limit its unit gives it in production."""

from __future__ import annotations

import configparser
import resource
from pathlib import Path

UNITS = Path(__file__).resolve().parents[2] / "systemd"


def service_section(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser["Service"]


def coordinator_descriptors() -> int:
    """coordinator.service's LimitNOFILE (its soft limit when it gives soft:hard); systemd's
    default soft limit, 1,024, when it sets none."""
    return int(service_section("coordinator.service").get("LimitNOFILE", "1024").split(":")[0])


def under_coordinator_limits() -> tuple[str, ...]:
    """A command prefix running a program with coordinator.service's descriptor limit, or this
    process's hard limit if lower (an unprivileged process cannot raise it)."""
    limit = min(coordinator_descriptors(), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    return ("prlimit", f"--nofile={limit}:{limit}")
