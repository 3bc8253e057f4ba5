"""CPU, memory and disk minimums by role, as kubeadm's NumCPU and Mem checks enforce them."""

from __future__ import annotations

from nodeagent.contract import Role
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

MiB = 1024 * 1024
GiB = 1024 * MiB
# kubeadm requires 2 CPUs and 1700 MB for a control-plane node; workers need room for kubelet.
MINIMUMS: dict[Role, tuple[int, int]] = {
    "manager": (2, 1700 * MiB),
    "worker": (1, 1024 * MiB),
}


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
    need = MINIMUMS[role][0]
    if cpus is None:
        return failed("cannot count CPUs: /proc/cpuinfo is unreadable", "check /proc is mounted")
    if cpus < need:
        return failed(
            f"{cpus} CPU(s); a {role} needs at least {need}",
            f"give this machine at least {need} CPUs",
            cpus=cpus,
            required=need,
        )
    return passed(f"{cpus} CPUs (a {role} needs {need})", cpus=cpus, required=need)


def evaluate_memory(total: int | None, role: Role) -> Outcome:
    need = MINIMUMS[role][1]
    if total is None:
        return failed("cannot read MemTotal from /proc/meminfo", "check /proc is mounted")
    data = {"bytes": total, "required_bytes": need}
    if total < need:
        return failed(
            f"{total // MiB} MiB of memory; a {role} needs at least {need // MiB} MiB",
            f"give this machine at least {need // MiB} MiB of memory",
            **data,
        )
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
