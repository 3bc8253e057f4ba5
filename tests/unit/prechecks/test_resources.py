from __future__ import annotations

import pytest

from nodeagent.prechecks import resources
from nodeagent.prechecks.resources import GiB, count_cpus, evaluate_disk, memory_total
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree


def cpuinfo(processors: int) -> str:
    return "".join(
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\n"
        f"physical id\t: 0\ncore id\t\t: {n}\n\n"
        for n in range(processors)
    )


def meminfo(kib: int) -> str:
    return f"MemTotal:       {kib} kB\nMemFree:        {kib // 2} kB\nSwapTotal: 0 kB\n"


def test_count_cpus_counts_processor_entries() -> None:
    assert count_cpus(cpuinfo(4)) == 4
    assert count_cpus("model name\t: x\n") is None
    assert count_cpus(None) is None


def test_memory_total_is_in_bytes() -> None:
    assert memory_total(meminfo(2048)) == 2048 * 1024
    assert memory_total("MemFree: 10 kB\n") is None
    assert memory_total(None) is None


@pytest.mark.parametrize(("role", "cpus", "status"), [
    ("worker", 1, Status.PASS), ("manager", 2, Status.PASS), ("manager", 1, Status.FAIL),
])
async def test_cpu_minimum_depends_on_the_role(
    role: str, cpus: int, status: Status, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/proc/cpuinfo", cpuinfo(cpus))
    outcome = await resources.run_cpu(make_ctx(role))
    assert outcome.status is status


async def test_too_few_cpus_for_a_manager(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/proc/cpuinfo", cpuinfo(1))
    outcome = await resources.run_cpu(make_ctx("manager"))
    assert outcome.message == "1 CPU(s); a manager needs at least 2"
    assert outcome.remedy == "give this machine at least 2 CPUs"
    assert outcome.data == {"cpus": 1, "required": 2}


async def test_enough_cpus_message(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/proc/cpuinfo", cpuinfo(8))
    outcome = await resources.run_cpu(make_ctx("manager"))
    assert outcome.message == "8 CPUs (a manager needs 2)"


async def test_unreadable_cpuinfo_fails(make_ctx: MakeContext) -> None:
    outcome = await resources.run_cpu(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "cannot count CPUs: /proc/cpuinfo is unreadable"


@pytest.mark.parametrize(("role", "mib", "status"), [
    ("worker", 1024, Status.PASS), ("worker", 1023, Status.FAIL),
    ("manager", 1700, Status.PASS), ("manager", 1699, Status.FAIL),
])
async def test_memory_minimum_depends_on_the_role(
    role: str, mib: int, status: Status, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/proc/meminfo", meminfo(mib * 1024))
    outcome = await resources.run_memory(make_ctx(role))
    assert outcome.status is status


async def test_too_little_memory_says_how_much_is_needed(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/proc/meminfo", meminfo(1536 * 1024))
    outcome = await resources.run_memory(make_ctx("manager"))
    assert outcome.message == "1536 MiB of memory; a manager needs at least 1700 MiB"
    assert outcome.remedy == "give this machine at least 1700 MiB of memory"
    assert outcome.data == {"bytes": 1536 * 1024 * 1024, "required_bytes": 1700 * 1024 * 1024}

    outcome = await resources.run_memory(make_ctx("worker"))
    assert outcome.status is Status.PASS
    assert outcome.message == "1536 MiB of memory (a worker needs 1024 MiB)"


async def test_meminfo_without_memtotal_fails(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/proc/meminfo", "MemFree: 10 kB\n")
    outcome = await resources.run_memory(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "cannot read MemTotal from /proc/meminfo"


def test_disk_threshold() -> None:
    assert evaluate_disk(5 * GiB, 5).status is Status.PASS
    low = evaluate_disk(int(2.5 * GiB), 5)
    assert low.status is Status.FAIL
    assert low.message == (
        "2.5 GiB free under /var; at least 5 GiB is needed for images, logs and etcd"
    )
    assert low.remedy == "free space under /var (or grow the filesystem holding it)"
    assert low.data == {"free_bytes": int(2.5 * GiB), "required_bytes": 5 * GiB}
    assert evaluate_disk(None, 5).message == "cannot read free space under /var"


async def test_disk_reads_the_filesystem_holding_the_tree(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.mkdir("/var")
    enough = await resources.run_disk(make_ctx(thresholds={"minVarFreeGiB": 0}))
    assert enough.status is Status.PASS
    assert enough.data["free_bytes"] > 0
    assert enough.message.endswith(" GiB free under /var")

    huge = await resources.run_disk(make_ctx(thresholds={"minVarFreeGiB": 10**9}))
    assert huge.status is Status.FAIL
    assert "at least 1e+09 GiB is needed" in huge.message


async def test_disk_without_var_uses_the_nearest_existing_parent(make_ctx: MakeContext) -> None:
    outcome = await resources.run_disk(make_ctx(thresholds={"minVarFreeGiB": 0}))
    assert outcome.status is Status.PASS
    assert outcome.data["free_bytes"] > 0
