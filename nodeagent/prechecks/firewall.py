"""firewalld and fapolicyd break pod and service traffic (and binary execution) unless tuned."""

from __future__ import annotations

from nodeagent.host import ProcessInfo
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

SERVICES = ("firewalld", "fapolicyd")


def systemd_running(ctx: CheckContext) -> bool:
    """systemd's own test (sd_booted): /run/systemd/system exists."""
    return ctx.host.exists("/run/systemd/system")


async def active_units(ctx: CheckContext) -> tuple[list[str], str]:
    active = []
    for unit in SERVICES:
        result = await ctx.host.run(["systemctl", "is-active", "--quiet", f"{unit}.service"])
        if result.returncode == 0:
            active.append(unit)
    return active, "systemd"


def running_processes(processes: list[ProcessInfo]) -> list[str]:
    return sorted({p.name for p in processes if p.name in SERVICES})


def evaluate(active: list[str], source: str) -> Outcome:
    if not active:
        return passed(f"no firewalld or fapolicyd running ({source})", source=source)
    return failed(
        f"{' and '.join(active)} active ({source})",
        "; ".join(f"`systemctl disable --now {name}`" for name in active)
        + ", or open the Kubernetes ports and allow the cluster's binaries",
        active=active,
        source=source,
    )


async def run(ctx: CheckContext) -> Outcome:
    if systemd_running(ctx):
        return evaluate(*(await active_units(ctx)))
    return evaluate(running_processes(await ctx.processes()), "process table")
