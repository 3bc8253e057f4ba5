"""A hostile client holding as many connections as it can from one address, never finishing a
request, against a real `coordinator serve --artifact-port` under coordinator.service's
descriptor limit: what an admin (a new connection per request, as the CLI), an agent
(heartbeats on its kept-alive connections) and an agent's download (through the artifact
port) wait meanwhile, from other addresses, on loopback. Its attacks (--attack):
- headers: a header line every --interval seconds, never the last (slowloris);
- body: a registration's complete headers (no token: its body is read), then a byte of the
  body every --interval seconds;
- artifact: TCP connections to the artifact port that never send a byte.

    # issue 20's attack: thousands of TLS connections from one address, a line every 10 s
    .venv/bin/python bench/slowloris.py --connections 4000 --interval 10 --duration 40 \
        --before cf7683e   # the same first against that revision, under its unit's limits
    # issue 31's: a slow body; idle connections to the artifact port
    .venv/bin/python bench/slowloris.py --attack body --connections 4000 --interval 1 \
        --duration 60 --before 6a15f92
    .venv/bin/python bench/slowloris.py --attack artifact --connections 400 --duration 60 \
        --before 6a15f92
    # seconds, every attack on a few dozen connections, one coordinator (CI runs it so that it
    # keeps working)
    .venv/bin/python bench/slowloris.py --quick

Prints the probes' latencies (p50, p99, max) without and then with the hostile client,
the connections it held (at most and on average during the measurement), how many of its
attempts the coordinator closed at once and how long it held those it closed later, and the
coordinator's open descriptors.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
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

from tests.support.driver import Registered
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.ports import free_port
from tests.support.probes import (
    Prober,
    admin_prober,
    agent_prober,
    as_another_machine,
    download_prober,
    percentile,
)
from tests.support.revisions import revision
from tests.support.units import under_coordinator_limits

HOSTILE_ADDRESS = "127.0.0.2"
REFUSED_PAUSE = 1.0  # seconds a hostile task waits after the coordinator closed its attempt
CLOSED_AT_ONCE = 0.5  # seconds: a connection closed sooner was refused, not timed out
# What a hostile connection sends first, and then every interval, by attack.
FIRST = {"headers": b"GET /v1/machines HTTP/1.1\r\nHost: coordinator\r\n",
         "body": b"POST /v1/agent/register HTTP/1.1\r\nHost: coordinator\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 4096\r\n\r\n{",
         "artifact": b""}
NEXT = {"headers": b"X-Slow: 1\r\n", "body": b" ", "artifact": b""}
ARTIFACT = "bundle.bin"
ARTIFACT_BYTES = 1 << 20


@dataclass(frozen=True)
class Attack:
    kind: str  # a key of FIRST
    port: int
    ca_file: str
    connections: int  # tasks, each holding one connection at a time
    interval: float
    seconds: float


def hostile(attack: Attack, pipe: Connection) -> None:
    """In a process of its own: hold connections for attack.seconds, then send back (the
    number held each second, attempts closed at once, seconds each the coordinator closed
    later was held, seconds each still open at the end had been)."""
    as_another_machine()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    pipe.send(uvloop.run(_hold(attack)))


async def _hold(attack: Attack) -> tuple[list[int], int, list[float], list[float]]:
    loop = asyncio.get_running_loop()
    # the artifact attack: TCP alone (its handshake never begins)
    context = None if attack.kind == "artifact" else \
        ssl.create_default_context(cafile=attack.ca_file)
    until = loop.time() + attack.seconds
    held, refused, samples, lifetimes, unended = [0], [0], [], [], []

    async def one() -> None:
        while loop.time() < until:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", attack.port, ssl=context,
                    server_hostname="127.0.0.1" if context else None,
                    local_addr=(HOSTILE_ADDRESS, 0)), timeout=30)
            except (OSError, TimeoutError):
                refused[0] += 1
                await asyncio.sleep(REFUSED_PAUSE)
                continue
            held[0] += 1
            opened, answer = loop.time(), None
            try:
                writer.write(FIRST[attack.kind])
                while loop.time() < until:
                    try:  # whatever comes back (a 408, the close) ends the connection
                        answer = await asyncio.wait_for(reader.read(1), attack.interval)
                        break
                    except TimeoutError:
                        writer.write(NEXT[attack.kind])
            except OSError:  # reset while writing
                answer = b""
            finally:
                held[0] -= 1
                writer.close()
            if answer == b"" and loop.time() - opened < CLOSED_AT_ONCE:
                refused[0] += 1  # a TCP connection the artifact port refused
                await asyncio.sleep(REFUSED_PAUSE)
            elif answer is not None:
                lifetimes.append(loop.time() - opened)
            else:  # still open when the attack ended
                unended.append(loop.time() - opened)

    async def sample() -> None:
        while loop.time() < until:
            samples.append(held[0])
            await asyncio.sleep(1)

    await asyncio.gather(sample(), *(one() for _ in range(attack.connections)))
    return samples, refused[0], lifetimes, unended


def measure(probers: list[Prober], seconds: float) -> None:
    for prober in probers:
        prober.reset()
    time.sleep(seconds)
    for prober in probers:
        print(f"  {prober.summary()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attack", choices=list(FIRST), default="headers",
                        help="what each hostile connection does (above)")
    parser.add_argument("--connections", type=int, default=4000,
                        help="connections the hostile client tries to hold from one address")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between its header lines (or body bytes) on each one")
    parser.add_argument("--duration", type=float, default=40.0,
                        help="seconds measured while it holds them")
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="seconds for the hostile client to open its connections")
    parser.add_argument("--before", metavar="REV", help="also measure the coordinator of this "
                        "git revision, under its own unit's limits, first (not with --quick)")
    parser.add_argument("--quick", action="store_true", help="every attack, 40 connections, "
                        "a share of 10 per address, timeouts of 0.8 s, seconds")
    parser.add_argument("serve_args", nargs="*", help="more `coordinator serve` options")
    args = parser.parse_args()
    serve_args = list(args.serve_args)
    attacks = [args.attack]
    if args.quick:
        # The smallest run that still takes the paths: more connections than the share (some
        # refused at once), timeouts shorter than the attack and out of step with its 3 s (some
        # closed later, and mostly some still open at its end). Every TLS handshake costs CPU,
        # and CI runs this.
        args.connections, args.interval, args.duration, args.warmup = 40, 0.25, 2.0, 1.0
        serve_args += ["--connections-per-address", "10", "--header-timeout", "0.8",
                       "--body-timeout", "0.8"]
        attacks = list(FIRST)
    # One coordinator per revision for all the attacks asked (--quick's three: a coordinator
    # start is the dearest part of a quick run); each attack's client is gone before the next.
    for rev in ([args.before] if args.before else []) + [None]:
        artifact_port = free_port() if "artifact" in attacks else None
        own_args = serve_args + ([] if artifact_port is None
                                 else ["--artifact-port", str(artifact_port)])
        with revision(rev) as tree, tempfile.TemporaryDirectory() as tmp, \
                running_coordinator(Path(tmp), serve_args=own_args,
                                    prefix=under_coordinator_limits(tree / "systemd")) as served:
            print(f"coordinator {rev or 'of this worktree'} under its coordinator.service's "
                  f"limits ({' '.join(served.prefix)}), serve "
                  f"{' '.join(own_args) or 'with its defaults'}")
            agent = served.register("probe-agent")
            for kind in attacks:
                attacked(served, agent, args, kind, artifact_port if kind == "artifact" else None)


def attacked(served: ServedCoordinator, agent: Registered, args: argparse.Namespace, kind: str,
             artifact_port: int | None) -> None:
    """The probes without, then with the hostile client."""
    probers = [admin_prober(served), agent_prober(served, agent)]
    if artifact_port is not None:
        (served.data / "artifacts" / ARTIFACT).write_bytes(os.urandom(ARTIFACT_BYTES))
        probers.append(download_prober(served, agent, ARTIFACT))
    for prober in probers:
        prober.start()
    print(f"no hostile client ({args.duration / 2:.0f} s):")
    measure(probers, args.duration / 2)
    attack = Attack(kind, artifact_port or served.port, str(served.ca_file), args.connections,
                    args.interval, args.warmup + args.duration)
    receiving, sending = multiprocessing.Pipe(duplex=False)
    attacker = multiprocessing.Process(target=hostile, args=(attack, sending))
    attacker.start()
    time.sleep(args.warmup)
    doing = {"headers": f"a header line every {args.interval:g} s",
             "body": f"complete headers, then a byte of the body every {args.interval:g} s",
             "artifact": "to the artifact port, never a byte"}[kind]
    print(f"a hostile client from {HOSTILE_ADDRESS} trying to hold {args.connections} "
          f"connections, {doing} ({args.duration:.0f} s):")
    measure(probers, args.duration)
    descriptors = psutil.Process(served.pid).num_fds()
    samples, refused, lifetimes, unended = receiving.recv()
    attacker.join()
    for prober in probers:
        prober.stop()
    during = samples[int(args.warmup):] or samples
    closed = (f"{len(lifetimes)} closed later, after p50 {percentile(lifetimes, 0.5):.1f} s "
              f"(max {max(lifetimes):.1f} s)") if lifetimes else "none closed later"
    if unended:
        closed += f", {len(unended)} still open at the end (the oldest for {max(unended):.0f} s)"
    print(f"  hostile connections held: at most {max(samples)}, on average "
          f"{statistics.mean(during):.0f} during the measurement; {refused} attempts closed "
          f"at once, {closed}; coordinator descriptors open at the end: {descriptors}")


if __name__ == "__main__":
    main()
