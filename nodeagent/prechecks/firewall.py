"""firewalld and fapolicyd break pod and service traffic (and binary execution) unless tuned."""

from __future__ import annotations

from nodeagent.host import ProcessInfo
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

SERVICES = ("firewalld", "fapolicyd")
# `systemctl is-active` exits 0 for an active unit, 3 for an inactive one and 4 for an
# unknown one (LSB status codes); anything else (127: no systemctl, 1: cannot reach
# systemd) means systemd did not answer.
_ACTIVE, _NOT_ACTIVE = 0, (3, 4)


def systemd_running(ctx: CheckContext) -> bool:
    """systemd's own test (sd_booted): /run/systemd/system exists."""
    return ctx.host.exists("/run/systemd/system")


async def active_units(ctx: CheckContext) -> list[str] | str:
    """Active units by systemd's account, or why systemctl could not tell."""
    active = []
    for unit in SERVICES:
        result = await ctx.host.run(["systemctl", "is-active", "--quiet", f"{unit}.service"])
        if result.returncode == _ACTIVE:
            active.append(unit)
        elif result.returncode not in _NOT_ACTIVE:
            reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[0]
            return f"systemctl is-active failed: {reason}"
    return active


def running_processes(processes: list[ProcessInfo]) -> list[str]:
    """SERVICES with a process of that name, in SERVICES order (as systemd reports them)."""
    names = {p.name for p in processes}
    return [service for service in SERVICES if service in names]


def evaluate(active: list[str], source: str, note: str = "") -> Outcome:
    data = {"source": source, **({"note": note} if note else {})}
    where = f"{source}; {note}" if note else source
    if not active:
        return passed(f"no firewalld or fapolicyd running ({where})", **data)
    return failed(
        f"{' and '.join(active)} active ({where})",
        "; ".join(f"`systemctl disable --now {name}`" for name in active)
        + ", or open the Kubernetes ports and allow the cluster's binaries",
        active=active,
        **data,
    )


async def run(ctx: CheckContext) -> Outcome:
    note = ""
    if systemd_running(ctx):
        units = await active_units(ctx)
        if isinstance(units, list):
            return evaluate(units, "systemd")
        note = units  # systemd did not answer: the process table still can
    return evaluate(running_processes(await ctx.processes()), "process table", note)
