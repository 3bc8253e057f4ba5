"""How fast an etcd snapshot goes to the coordinator and back, and what it costs the
coordinator's memory: a manager's agent uploads an N MiB snapshot with its own client (the
file streamed from disk) to a coordinator on SQLite served as `coordinator serve` serves it,
which seals and stores it a MiB at a time; the admin client then downloads it into a file;
then a backup carrying it is taken. Python's peak allocation (tracemalloc, every thread) is
measured during each, so a snapshot held whole in memory anywhere would show as its size.

    .venv/bin/python bench/etcd_snapshots.py [--mib N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' builders

from aiohttp import web

from coordinator.api.app import create_app
from coordinator.api.context import Presentation
from coordinator.cli.client import AdminClient
from coordinator.domain.changes import Change
from coordinator.domain.machines.tokens import ADMIN, new_token, token_hash
from coordinator.domain.model import MachineState
from coordinator.service.coordinator import Coordinator
from coordinator.store.sqlite import SQLiteStore
from nodeagent.client import CoordinatorClient
from nodeagent.wire.endpoint import Endpoint
from tests.support.builders import TEST_CIPHER, registration
from tests.support.ports import free_port

CLUSTER = """\
name: lab
release: "1.0"
settings: {{etcdSnapshots: {{maxSizeMiB: {limit}}}}}
machineTypes:
  manager:
    - {{name: etcd-snapshot, phase: upgrade, etcdSnapshotFrom: /s.db,
       action: {{type: exec, argv: ["true"]}}}}
"""
MIB = 2**20


async def measured(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Seconds work took, and the peak of Python's allocations meanwhile beyond those before
    it, in MiB."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    await work()
    took = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return took, (peak - base) / MIB


async def run(mib: int, directory: Path) -> None:
    store = SQLiteStore(directory / "coordinator.db", TEST_CIPHER)
    await store.open()
    coordinator = Coordinator(store)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    runner = web.AppRunner(create_app(coordinator, directory, Presentation(advertise_url=url),
                                      directory), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        secret = new_token("admin")
        await store.add_admin_token(token_hash(secret), "bench", ADMIN, time.time())
        admin = AdminClient(url, secret)
        await asyncio.to_thread(admin.request, "PUT", "/v1/clusters", None,
                                CLUSTER.format(limit=mib + 1), "application/yaml")
        join = await asyncio.to_thread(admin.request, "POST", "/v1/clusters/lab/join-tokens", {})
        agent_client = CoordinatorClient([Endpoint(url)])
        agent = await agent_client.register(registration("m1", join["token"]))
        machine = await store.get_machine(agent["machine_id"])
        assert machine is not None
        await coordinator.writes.apply(Change(machines=[replace(
            machine, role="manager", approved=True, state=MachineState.UPGRADE)]))

        snapshot = directory / "snapshot.db"
        with snapshot.open("wb") as handle:
            for _ in range(mib):
                handle.write(os.urandom(MIB))

        async def upload() -> None:
            with snapshot.open("rb") as handle:
                await agent_client.upload_etcd_snapshot(agent["machine_id"],
                                                        agent["credential"], "etcd-snapshot",
                                                        handle)

        up, up_peak = await measured(upload)
        (kept,) = await asyncio.to_thread(admin.request, "GET", "/v1/clusters/lab/etcd-snapshots")
        out = directory / "downloaded.db"

        async def download() -> None:
            with out.open("wb") as handle:
                await asyncio.to_thread(
                    admin.download_into, "POST",
                    f"/v1/clusters/lab/etcd-snapshots/{kept['id']}/download",
                    "application/octet-stream", lambda _: None, handle.write)

        down, down_peak = await measured(download)
        assert out.read_bytes() == snapshot.read_bytes()

        async def backup() -> None:
            await asyncio.to_thread(admin.download, "POST", "/v1/backup", "application/gzip",
                                    lambda _: None)

        taken, backup_peak = await measured(backup)
        database = sum(p.stat().st_size for p in directory.glob("coordinator.db*"))
        print(f"etcd snapshot of {mib} MiB (random bytes), SQLite store, loopback HTTP")
        print(f"  upload (agent client -> sealed chunks): {up:.2f} s, {mib / up:.0f} MiB/s, "
              f"peak allocation {up_peak:.1f} MiB")
        print(f"  download (CLI's client <- unsealed chunks): {down:.2f} s, {mib / down:.0f} "
              f"MiB/s, peak allocation {down_peak:.1f} MiB")
        print(f"  backup carrying it: {taken:.2f} s, peak allocation {backup_peak:.1f} MiB")
        print(f"  database on disk: {database / MIB:.1f} MiB")
    finally:
        await runner.cleanup()
        await coordinator.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="8 MiB, for CI")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(8 if args.quick else args.mib, Path(tmp)))


if __name__ == "__main__":
    main()
