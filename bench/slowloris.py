"""A hostile client holding as many connections as it can from one address, each sending a
header line every --interval seconds and never finishing its request (slowloris), against a
real `coordinator serve` under coordinator.service's descriptor limit: what an admin (a new
connection per request, as the CLI) and an agent (heartbeats on its kept-alive connections)
wait meanwhile, from other addresses, on loopback.

    # the issue's attack: thousands of TLS connections from one address, a line every 10 s
    .venv/bin/python bench/slowloris.py --connections 4000 --interval 10 --duration 40 \
        --before cf7683e   # the same first against that revision, under its unit's limits
    # seconds, on a few hundred connections (CI runs it so that the script keeps working)
    .venv/bin/python bench/slowloris.py --quick

Prints the admin and agent latencies (p50, p99, max) without and then with the hostile client,
the connections it held (at most and on average during the measurement) and how many of its
attempts the coordinator closed at once, and the coordinator's open descriptors.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
import uvloop

from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.probes import Prober, admin_prober, agent_prober, as_another_machine
from tests.support.revisions import revision
from tests.support.units import under_coordinator_limits

HOSTILE_ADDRESS = "127.0.0.2"
REFUSED_PAUSE = 1.0  # seconds a hostile task waits after the coordinator closed its attempt


@dataclass(frozen=True)
class Attack:
    port: int
    ca_file: str
    connections: int  # tasks, each holding one connection at a time
    interval: float
    seconds: float


def hostile(attack: Attack, pipe: Connection) -> None:
    """In a process of its own: hold connections for attack.seconds, then send back (the
    number held each second, attempts closed at once)."""
    as_another_machine()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    pipe.send(uvloop.run(_hold(attack)))


async def _hold(attack: Attack) -> tuple[list[int], int]:
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cafile=attack.ca_file)
    until = loop.time() + attack.seconds
    held, refused, samples = [0], [0], []

    async def one() -> None:
        while loop.time() < until:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", attack.port, ssl=context, server_hostname="127.0.0.1",
                    local_addr=(HOSTILE_ADDRESS, 0)), timeout=30)
            except (OSError, TimeoutError):
                refused[0] += 1
                await asyncio.sleep(REFUSED_PAUSE)
                continue
            held[0] += 1
            try:
                writer.write(b"GET /v1/machines HTTP/1.1\r\nHost: coordinator\r\n")
                while loop.time() < until:
                    try:  # whatever comes back (the close, most likely) ends the connection
                        await asyncio.wait_for(reader.read(1), attack.interval)
                        break
                    except TimeoutError:
                        writer.write(b"X-Slow: 1\r\n")
            finally:
                held[0] -= 1
                writer.close()

    async def sample() -> None:
        while loop.time() < until:
            samples.append(held[0])
            await asyncio.sleep(1)

    await asyncio.gather(sample(), *(one() for _ in range(attack.connections)))
    return samples, refused[0]


def measure(probers: list[Prober], seconds: float) -> None:
    for prober in probers:
        prober.reset()
    time.sleep(seconds)
    for prober in probers:
        print(f"  {prober.summary()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=4000,
                        help="connections the hostile client tries to hold from one address")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between its header lines on each connection")
    parser.add_argument("--duration", type=float, default=40.0,
                        help="seconds measured while it holds them")
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="seconds for the hostile client to open its connections")
    parser.add_argument("--before", metavar="REV", help="also measure the coordinator of this "
                        "git revision, under its own unit's limits, first (not with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="300 connections, a share of 50 per address, seconds")
    parser.add_argument("serve_args", nargs="*", help="more `coordinator serve` options")
    args = parser.parse_args()
    serve_args = list(args.serve_args)
    if args.quick:
        args.connections, args.interval, args.duration, args.warmup = 300, 0.5, 3.0, 2.0
        serve_args += ["--connections-per-address", "50", "--header-timeout", "2"]
    for rev in ([args.before] if args.before else []) + [None]:
        with revision(rev) as tree, tempfile.TemporaryDirectory() as tmp, running_coordinator(
                Path(tmp), serve_args=serve_args,
                prefix=under_coordinator_limits(tree / "systemd")) as served:
            print(f"coordinator {rev or 'of this worktree'} under its coordinator.service's "
                  f"limits ({' '.join(served.prefix)}), serve "
                  f"{' '.join(serve_args) or 'with its defaults'}")
            attacked(served, args)


def attacked(served: ServedCoordinator, args: argparse.Namespace) -> None:
    """The probes without, then with the hostile client."""
    agent = served.register("probe-agent")
    probers = [admin_prober(served).start(), agent_prober(served, agent).start()]
    print(f"no hostile client ({args.duration / 2:.0f} s):")
    measure(probers, args.duration / 2)
    attack = Attack(served.port, str(served.ca_file), args.connections, args.interval,
                    args.warmup + args.duration)
    receiving, sending = multiprocessing.Pipe(duplex=False)
    attacker = multiprocessing.Process(target=hostile, args=(attack, sending))
    attacker.start()
    time.sleep(args.warmup)
    print(f"a hostile client from {HOSTILE_ADDRESS} trying to hold {args.connections} "
          f"connections, a header line every {args.interval:g} s ({args.duration:.0f} s):")
    measure(probers, args.duration)
    descriptors = psutil.Process(served.pid).num_fds()
    samples, refused = receiving.recv()
    attacker.join()
    for prober in probers:
        prober.stop()
    during = samples[int(args.warmup):] or samples
    print(f"  hostile connections held: at most {max(samples)}, on average "
          f"{statistics.mean(during):.0f} during the measurement; {refused} attempts closed "
          f"at once; coordinator descriptors open at the end: {descriptors}")

if __name__ == "__main__":
    main()
