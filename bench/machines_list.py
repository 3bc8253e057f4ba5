"""What a page of GET /v1/machines costs on a large fleet (SQLite store, over HTTP): the
default page, and pages filtered, searched and sorted. The dashboard and `coordinator
machines` ask for a page at a time, so a page must stay well under 100 ms at 10,000 machines
whatever the filters.

    .venv/bin/python bench/machines_list.py [--machines 1000,10000] [--runs 50] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

from bench.status import fleet, seeded
from tests.support.harness import in_process_coordinator
from tests.support.probes import percentile
from tests.support.servegc import serve_gc

QUERIES = {
    "first page (100, by hostname)": "",
    "state=Deploy": "state=Deploy",
    "label zone=b, role=worker": "label=zone%3Db&role=worker",
    "q=node-09, sort=-last_seen": "q=node-09&sort=-last_seen",
    "sort=state_since, offset=5000": "sort=state_since&offset=5000",
}


async def timings(directory: Path, count: int, runs: int) -> dict[str, tuple[list[float], float]]:
    """Per query: the seconds of each request, and the process CPU seconds of the median."""
    machines, _ = fleet(count)
    machines = [replace(m, labels={"zone": "ab"[n % 2]}, last_seen=100.0 + n % 97)
                for n, m in enumerate(machines)]
    found: dict[str, tuple[list[float], float]] = {}
    async with in_process_coordinator(directory, None, clock=time.time) as coordinator:
        await seeded(coordinator, machines, [])
        await coordinator.client.get("/v1/machines", headers=coordinator.admin)  # warm-up
        async with serve_gc():  # as `coordinator serve` collects garbage
            for name, query in QUERIES.items():
                walls: list[float] = []
                cpus: list[float] = []
                for _ in range(runs):
                    started, cpu = time.perf_counter(), time.process_time()
                    response = await coordinator.client.get(f"/v1/machines?{query}",
                                                            headers=coordinator.admin)
                    page = await response.json()
                    cpus.append(time.process_time() - cpu)
                    walls.append(time.perf_counter() - started)
                    assert response.status == 200, page
                found[name] = walls, statistics.median(cpus)
    return found



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", default="1000,10000")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="200 machines, 3 runs: seconds")
    args = parser.parse_args()
    if args.quick:
        args.machines, args.runs = "200", 3
    print(f"{'machines':>8}  {'query':<32} {'p50':>8} {'p99':>8} {'CPU p50':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(c) for c in args.machines.split(",")):
            directory = Path(tmp) / f"bench-{count}"
            directory.mkdir()
            for name, (walls, cpu) in asyncio.run(timings(directory, count, args.runs)).items():
                print(f"{count:>8}  {name:<32} {statistics.median(walls) * 1000:>5.1f} ms "
                      f"{percentile(walls, 0.99) * 1000:>5.1f} ms {cpu * 1000:>5.1f} ms", flush=True)


if __name__ == "__main__":
    main()
