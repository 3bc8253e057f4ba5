"""Registrations nobody may make, flooding from 50 addresses, against a real `coordinator serve`
under coordinator.service's descriptor limit: what an admin waits meanwhile (a new connection
per request, as the CLI), and what the flood costs the coordinator. Two floods: 4 MiB bodies
with a join token the coordinator never issued (in the Authorization header and the body, as
agents send it), and 60 KiB bodies without the header (as agents before it sent them). With
--before REV, the same runs against that revision of the coordinator first (exported with
`git archive`, run on this venv), side by side.

    .venv/bin/python bench/register_flood.py --before cf7683e --duration 20
    .venv/bin/python bench/register_flood.py --quick   # seconds; CI runs it

Prints, per coordinator and flood: admin latency p50/p99/max, the flood's answers by status,
and the coordinator's CPU while it lasted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import psutil
import uvloop

from tests.support.builders import registration
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.probes import Prober, admin_prober, as_another_machine
from tests.support.revisions import revision
from tests.support.units import under_coordinator_limits

FORGED = "join_" + "f" * 43  # shaped like a join token, issued by nobody
ADDRESSES = [f"127.0.3.{index}" for index in range(1, 51)]


@dataclass(frozen=True)
class Flood:
    name: str
    size: int  # bytes of each body
    header: bool  # the token in the Authorization header too

    def body(self) -> bytes:
        """A registration that parses and validates: facts of many small objects (what costs
        most to parse and validate per byte)."""
        facts = {"padding": [{"a": 1}] * max(0, (self.size - 2048) // 10)}
        return json.dumps(registration("flood", FORGED, facts=facts)).encode()


FLOODS = (Flood("4 MiB bodies, forged token", 4_000_000, header=True),
          Flood("60 KiB bodies, no header", 60_000, header=False))


def flood(url: str, ca_file: str, kind: Flood, seconds: float, pipe: Connection) -> None:
    """In a process of its own: one registration at a time from each address for seconds; sends
    back the answers' statuses."""
    as_another_machine()
    pipe.send(uvloop.run(_flood(url, ca_file, kind, seconds)))


async def _flood(url: str, ca_file: str, kind: Flood, seconds: float) -> Counter[str]:
    import ssl

    context = ssl.create_default_context(cafile=ca_file)
    body = kind.body()
    headers = {"Content-Type": "application/json",
               **({"Authorization": f"Bearer {FORGED}"} if kind.header else {})}
    until = time.monotonic() + seconds
    statuses: Counter[str] = Counter()

    async def from_address(address: str) -> None:
        connector = aiohttp.TCPConnector(local_addr=(address, 0), ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:
            while time.monotonic() < until:
                try:
                    async with session.post(url + "/v1/agent/register", data=body,
                                            headers=headers) as answer:
                        await answer.read()
                        statuses[str(answer.status)] += 1
                        if answer.status == 429:
                            await asyncio.sleep(0.1)
                except (aiohttp.ClientError, OSError) as exc:
                    statuses[type(exc).__name__] += 1
                    await asyncio.sleep(0.1)

    await asyncio.gather(*map(from_address, ADDRESSES))
    return statuses


def cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def run_floods(served: ServedCoordinator, seconds: float) -> None:
    admin: Prober = admin_prober(served).start()
    time.sleep(seconds / 2)
    admin.reset()
    time.sleep(seconds / 2)
    print(f"  {'no flood':<28s} {admin.summary()}")
    for kind in FLOODS:
        receiving, sending = multiprocessing.Pipe(duplex=False)
        flooder = multiprocessing.Process(target=flood, args=(
            served.url, str(served.ca_file), kind, seconds, sending))
        started = cpu(served.pid)
        flooder.start()
        time.sleep(0.5)  # the flood under way
        admin.reset()
        statuses = receiving.recv()
        flooder.join()
        print(f"  {kind.name:<28s} {admin.summary()}")
        answers = ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items()))
        print(f"  {'':<28s} flood answers {answers}; coordinator CPU "
              f"{(cpu(served.pid) - started) / seconds * 100:.0f} % of a core")
    admin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each flood")
    parser.add_argument("--before", metavar="REV",
                        help="also measure the coordinator of this git revision, first")
    parser.add_argument("--quick", action="store_true", help="1 s floods, 5 registrations a "
                        "second read in all (some answered 429 within the second): seconds")
    args = parser.parse_args()
    serve_args: list[str] = []
    if args.quick:
        args.duration, serve_args = 1.0, ["--register-rate-total", "5"]
    for rev in ([args.before] if args.before else []) + [None]:
        with revision(rev) as tree, tempfile.TemporaryDirectory() as tmp, running_coordinator(
                Path(tmp), serve_args=serve_args,
                prefix=under_coordinator_limits(tree / "systemd")) as served:
            print(f"coordinator {rev or 'of this worktree'} ({' '.join(served.prefix)})"
                  f"{', serve ' + ' '.join(serve_args) if serve_args else ''}, "
                  f"{len(ADDRESSES)} flooding addresses, {args.duration:g} s each:")
            run_floods(served, args.duration)


if __name__ == "__main__":
    main()
