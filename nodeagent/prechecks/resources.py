"""CPU, memory and disk minimums: the role's CPU and memory (nodeagent/wire/minimums.py, shared with
the coordinator's approval), and the free disk the config asks for."""

from __future__ import annotations

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed
from nodeagent.wire.contract import Role
from nodeagent.wire.minimums import CPU, MEMORY, MiB

GiB = 1024 * MiB


def count_cpus(cpuinfo: str | None) -> int | None:
    if cpuinfo is None:
        return None
    count = sum(1 for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "processor")
    return count or None


def memory_total(meminfo: str | None) -> int | None:
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            return int(fields[1]) * 1024  # reported in kB
    return None


def evaluate_cpu(cpus: int | None, role: Role) -> Outcome:
    need = CPU.need[role]
    if cpus is None:
        return failed("cannot count CPUs: /proc/cpuinfo is unreadable", "check /proc is mounted")
    data = {CPU.key: cpus, "required": need}
    shortfall = CPU.shortfall(cpus, role)
    if shortfall:
        return failed(shortfall, f"give this machine at least {need} CPUs", **data)
    return passed(f"{cpus} CPUs (a {role} needs {need})", **data)


def evaluate_memory(total: int | None, role: Role) -> Outcome:
    need = MEMORY.need[role]
    if total is None:
        return failed("cannot read MemTotal from /proc/meminfo", "check /proc is mounted")
    data = {MEMORY.key: total, "required_bytes": need}
    shortfall = MEMORY.shortfall(total, role)
    if shortfall:
        return failed(shortfall, f"give this machine at least {need // MiB} MiB of memory", **data)
    return passed(f"{total // MiB} MiB of memory (a {role} needs {need // MiB} MiB)", **data)


def evaluate_disk(free: int | None, min_gib: float) -> Outcome:
    need = int(min_gib * GiB)
    if free is None:
        return failed("cannot read free space under /var", "check that /var is mounted")
    data = {"free_bytes": free, "required_bytes": need}
    if free < need:
        return failed(
            f"{free / GiB:.1f} GiB free under /var; at least {min_gib:g} GiB is needed "
            "for images, logs and etcd",
            "free space under /var (or grow the filesystem holding it)",
            **data,
        )
    return passed(f"{free / GiB:.1f} GiB free under /var", **data)


async def run_cpu(ctx: CheckContext) -> Outcome:
    return evaluate_cpu(count_cpus(ctx.host.read_text("/proc/cpuinfo")), ctx.role)


async def run_memory(ctx: CheckContext) -> Outcome:
    return evaluate_memory(memory_total(ctx.host.read_text("/proc/meminfo")), ctx.role)


async def run_disk(ctx: CheckContext) -> Outcome:
    return evaluate_disk(ctx.host.free_bytes("/var"), ctx.config.thresholds.min_var_free_gib)
