"""A fleet of simulated agents against a real `coordinator serve`: how the coordinator holds up.

Each simulated agent speaks the agent protocol as nodeagent does (register with a join token,
long-poll its assignment, the poll counting as its heartbeat every --heartbeat-interval
seconds, report each assigned item "running" then "succeeded" at once: no-op items), but costs
a few kilobytes: the agents are asyncio tasks, each with its own connection (as a real agent
holds one), over HTTPS with the coordinator's own CA, on loopback. --two-connections speaks
the protocol of agents before nodeagent/wire/heartbeat.py: a heartbeat every interval on a
second connection beside a poll parked for 30 s (nodeagent/pacing.py LONG_POLL_SECONDS).

    # (a) a steady fleet: N Pending agents heartbeating and long-polling for --duration s
    .venv/bin/python bench/fleet.py --agents 10000 --heartbeat-interval 10 --duration 60
    # (b) a rollout: managers and workers approved at once, no-op items, worker batches
    .venv/bin/python bench/fleet.py --managers 3 --workers 1000 --batch-size 50
    # (c) both in seconds, on a handful of agents (CI runs it so that the script keeps working)
    .venv/bin/python bench/fleet.py --quick

Prints the registration rate; agent API latency p50/p99 per endpoint (the long-poll only
when it answered at once, and how late it answered a poll that timed out); coordinator CPU
and peak RSS (psutil on its pid); for a rollout its duration and the ordering overhead: for
each machine admitted to Deploy, the time from the latest "done" report the coordinator
accepted to the machine receiving its Deploy assignment (plan, commit, wake, answer).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import http.client
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import psutil
import uvloop

from nodeagent.pacing import PollPace
from nodeagent.wire.heartbeat import POLL_COUNTED, POLL_HEARTBEAT
from tests.support.builders import FACTS, cluster, fingerprint, item, registration, spec_text
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.postgres import postgres_server
from tests.support.probes import ms, percentile
from tests.support.units import under_coordinator_limits

CLUSTER = "fleet"
NOT_MODIFIED: dict[str, Any] = {}  # a poll answered 304: the assignment held is current
NOOPS = (item("prepare-noop", "prepare"), item("deploy-noop", "deploy"))


def cluster_spec(batch: int, heartbeat_timeout: float) -> str:
    return spec_text(cluster(NOOPS, NOOPS, batch, name=CLUSTER, release="1",
                             heartbeatTimeoutSeconds=heartbeat_timeout))


@dataclass
class Plan:
    """What one simulator process does; sent to it at start."""

    url: str
    ca_file: str
    join_token: str
    hostnames: list[str]
    heartbeat_interval: float
    register_concurrency: int
    two_connections: bool = False  # the protocol before polls counted as heartbeats


@dataclass
class Recorder:
    """Latencies (time, endpoint, seconds) and rollout marks (time, hostname, what)."""

    calls: list[tuple[float, str, float]] = field(default_factory=list)
    marks: list[tuple[float, str, str]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class SimAgent:
    def __init__(self, sim: Simulator, hostname: str) -> None:
        self.sim = sim
        self.hostname = hostname
        self.machine_id = ""
        self.headers: dict[str, str] = {}
        self.generation = 0
        self.tag = ""  # the ETag of the assignment held, sent back as If-None-Match
        self.state = ""
        self.polls_beat = False  # the coordinator said a poll counts as a heartbeat
        self.pace = PollPace(sim.rand)  # as nodeagent's daemon parks its polls
        self.session: aiohttp.ClientSession | None = None  # its own connection(s)

    async def register(self) -> None:
        """Until the coordinator accepts it (errors are counted, not fatal)."""
        token = self.sim.plan.join_token
        body = registration(self.hostname, token, facts=FACTS, checks=13)
        while (answer := await self.sim.call(self, "POST", "/v1/agent/register", "register",
                                             json=body,
                                             headers={"Authorization": f"Bearer {token}"})) is None:
            await asyncio.sleep(0.5)
        self.machine_id = answer["machine_id"]
        self.headers = {"Authorization": f"Bearer {answer['credential']}"}

    async def heartbeat_forever(self) -> None:
        """A heartbeat every interval, unless the coordinator counts the polls."""
        interval = self.sim.plan.heartbeat_interval
        await asyncio.sleep(random.uniform(0, interval))
        while True:
            started = time.monotonic()
            if not self.polls_beat:
                await self.sim.call(self, "POST", f"{self.path}/heartbeat", "heartbeat",
                                    headers=self.headers)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    @property
    def path(self) -> str:
        return f"/v1/agent/machines/{self.machine_id}"

    async def follow_forever(self) -> None:
        """Long-poll; on a new assignment report each item running, then succeeded."""
        wait = 0.0
        while True:
            answer: dict[str, str] = {}
            held = {"If-None-Match": self.tag} if self.tag else {}
            started = time.monotonic()
            assignment = await self.sim.call(
                self, "GET", f"{self.path}/assignment?after={self.generation}&wait={wait}",
                "assignment", poll=wait, timeout=wait + 60, answer=answer,
                headers={**self.headers, **held})
            if assignment is None:
                self.pace.unanswered()
                await asyncio.sleep(1)
                continue
            self.pace.answered(time.monotonic() - started, wait)
            self.polls_beat = not self.sim.plan.two_connections \
                and answer.get(POLL_HEARTBEAT) == POLL_COUNTED
            wait = self.pace.next(self.sim.plan.heartbeat_interval, self.polls_beat)
            tags = [answer["ETag"]] if "ETag" in answer else []
            if assignment is NOT_MODIFIED or tags == [self.tag]:
                continue
            self.generation, self.tag = assignment["generation"], tags[0]
            now = time.monotonic()
            if assignment["state"] != self.state:
                self.state = assignment["state"]
                self.sim.recorder.marks.append((now, self.hostname, "state:" + self.state))
                if self.state == "Ready":
                    self.sim.became_ready()
            phase = assignment["phase"]
            if phase is None:
                continue
            self.sim.recorder.marks.append((now, self.hostname, "assigned:" + phase))
            applied = set(assignment["applied"])
            for entry in assignment["items"]:
                digest = self.sim.fingerprint(entry)
                if digest in applied:
                    continue
                for status in ("running", "succeeded"):
                    report = {"item": entry["name"], "fingerprint": digest, "phase": phase,
                              "status": status, "attempt": 1, "started_at": time.time()}
                    if status == "succeeded":
                        report.update(finished_at=time.time(), exit_code=0, output="ok\n")
                    await self.sim.call(self, "POST", f"{self.path}/reports", "report",
                                        headers=self.headers, json=report)
            self.sim.recorder.marks.append((time.monotonic(), self.hostname, "done:" + phase))


class Simulator:
    """Many agents in one process, each with its own connections."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.recorder = Recorder()
        self.rand = random.Random()
        self.agents = [SimAgent(self, h) for h in plan.hostnames]
        self._fingerprints: dict[str, str] = {}
        self.context = ssl.create_default_context(cafile=plan.ca_file)
        self.pipe: Connection | None = None
        self._ready = 0

    def became_ready(self) -> None:
        """Tell the driver once every agent of this process has seen Ready."""
        self._ready += 1
        if self._ready == len(self.agents) and self.pipe is not None:
            self.pipe.send(("ready", time.monotonic()))

    def fingerprint(self, item: dict[str, Any]) -> str:
        key = json.dumps(item, sort_keys=True)
        if key not in self._fingerprints:
            self._fingerprints[key] = fingerprint(item)
        return self._fingerprints[key]

    def session(self, agent: SimAgent) -> aiohttp.ClientSession:
        """The agent's own, a connection for each call in flight as nodeagent's client: one
        while polls count as heartbeats, two (heartbeats beside the parked poll) before."""
        if agent.session is None:
            connector = aiohttp.TCPConnector(limit=0, ssl=self.context, ttl_dns_cache=None)
            agent.session = aiohttp.ClientSession(connector=connector)
        return agent.session

    async def call(self, agent: SimAgent, method: str, path: str, endpoint: str,
                   poll: float = 0.0, timeout: float = 60.0, answer: dict[str, str] | None = None,
                   **kwargs: Any) -> Any:
        """The JSON answer, or None after an error (counted); the headers that matter put in
        answer. Latency is recorded unless the call was a long poll, whose wait is not the
        coordinator's cost: then the overshoot of a timed-out poll is recorded instead."""
        started = time.monotonic()
        try:
            async with self.session(agent).request(
                    method, self.plan.url + path, timeout=aiohttp.ClientTimeout(total=timeout),
                    **kwargs) as response:
                body = NOT_MODIFIED if response.status == 304 else await response.json()
                if answer is not None:
                    answer.update((name, response.headers[name])
                                  for name in ("ETag", POLL_HEARTBEAT) if name in response.headers)
                if response.status >= 400:
                    self.recorder.errors[f"{endpoint} {response.status}"] += 1
                    return None
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.recorder.errors[f"{endpoint} {type(exc).__name__}"] += 1
            return None
        elapsed = time.monotonic() - started
        if not poll:
            self.recorder.calls.append((started, endpoint, elapsed))
        elif elapsed >= poll:
            self.recorder.calls.append((started, "assignment (poll overshoot)", elapsed - poll))
        return body

    async def run(self, pipe: Connection) -> None:
        self.pipe = pipe
        try:
            gate = asyncio.Semaphore(self.plan.register_concurrency)
            tasks: list[asyncio.Task[None]] = []

            async def register(agent: SimAgent) -> None:
                """Then heartbeat and follow at once, as an agent does."""
                async with gate:
                    await agent.register()
                tasks.extend(asyncio.create_task(coro) for coro in (
                    agent.heartbeat_forever(), agent.follow_forever()))

            started = time.monotonic()
            await asyncio.gather(*(register(a) for a in self.agents))
            pipe.send(("registered", time.monotonic() - started))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, pipe.recv)  # "stop"
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.gather(*(agent.session.close() for agent in self.agents
                                   if agent.session is not None))
        pipe.send(("recorded", self.recorder.calls, self.recorder.marks,
                   dict(self.recorder.errors), time.process_time()))


def simulate(plan: Plan, pipe: Connection) -> None:
    # A full collection over thousands of agents stalls this process for 0.3 s, which would
    # be measured as the coordinator's latency; a run lasts minutes, its cycles can wait.
    gc.disable()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # each agent's connections are ours
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvloop.run(Simulator(plan).run(pipe))


# -- the driver ------------------------------------------------------------------------------

class Sampler(threading.Thread):
    """The coordinator's RSS every 0.2 s (peak) and its CPU time between marks."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak_rss = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            try:
                self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            except psutil.Error:
                return

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system


def metrics_text(url: str, ca_file: str) -> str:
    context = ssl.create_default_context(cafile=ca_file)
    with urllib.request.urlopen(f"{url}/metrics", timeout=30, context=context) as response:
        return str(response.read().decode())


class Scraper(threading.Thread):
    """Reads /metrics every `interval` seconds, as a Prometheus would, for as long as the
    fleet runs: what a monitored coordinator costs is part of its latency."""

    def __init__(self, url: str, ca_file: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.ca_file, self.interval = url, ca_file, interval
        self.scrapes: list[tuple[float, float]] = []  # (started, seconds)
        self.stopped = threading.Event()
        self.failed: list[str] = []  # why each scrape that was not answered failed

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            started = time.monotonic()
            try:
                metrics_text(self.url, self.ca_file)
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, cut short
                self.failed.append(f"{type(exc).__name__}: {exc}")
                continue
            self.scrapes.append((started, time.monotonic() - started))


def gc_pauses(url: str, ca_file: str) -> dict[str, tuple[float, float, float]]:
    """The coordinator's garbage collections so far, from /metrics: generation -> (count,
    seconds paused, longest pause since start)."""
    text = metrics_text(url, ca_file)
    found: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    names = ("nodeagent_gc_collections_total", "nodeagent_gc_pause_seconds_total",
             "nodeagent_gc_pause_longest_seconds")
    for line in text.splitlines():
        name, _, rest = line.partition('{generation="')
        if name in names:
            generation, _, value = rest.partition('"} ')
            found[generation][names.index(name)] = float(value)
    return {generation: (count, seconds, longest)
            for generation, (count, seconds, longest) in found.items()}


def ordering(marks: list[tuple[float, str, str]]) -> list[tuple[float, float]]:
    """For each admission to Deploy after the first: when, and the time since the latest done
    report."""
    done_times = sorted(t for t, _, what in marks if what.startswith("done:"))
    gaps = []
    for t, _, what in sorted(marks):
        if what != "assigned:deploy":
            continue
        before = [d for d in done_times if d <= t]
        if before:
            gaps.append((t, t - before[-1]))
    return gaps


def gc_summary(before: dict[str, tuple[float, float, float]],
               after: dict[str, tuple[float, float, float]]) -> str:
    """Collections between two /metrics reads (generation: count, CPU time, longest since
    start)."""
    return ", ".join(f"{g}: {after[g][0] - before[g][0]:.0f}, "
                     f"{ms(after[g][1] - before[g][1])}, {ms(after[g][2])}" for g in sorted(after))


def approve_all(url: str, ca_file: str, token: str, managers: list[str], workers: list[str],
                concurrency: int = 32) -> None:
    async def run() -> None:
        context = ssl.create_default_context(cafile=ca_file)
        headers = {"Authorization": f"Bearer {token}"}
        gate = asyncio.Semaphore(concurrency)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            async def approve(hostname: str, role: str) -> None:
                async with gate, session.post(f"{url}/v1/machines/{hostname}/approve",
                                              json={"role": role}, headers=headers) as response:
                    if response.status != 200:
                        raise SystemExit(f"approve {hostname}: HTTP {response.status} "
                                         f"{await response.text()}")
            for hostname in managers:  # in order: the first registered deploys first
                await approve(hostname, "manager")
            await asyncio.gather(*(approve(h, "worker") for h in workers))
    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000, help="Pending agents (no rollout)")
    parser.add_argument("--managers", type=int, default=0, help="with --workers: a rollout")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=50, help="settings.workerBatchSize")
    parser.add_argument("--heartbeat-interval", type=float, default=10.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0)
    parser.add_argument("--duration", type=float, default=30.0,
                        help="seconds of steady heartbeats measured after registration/rollout")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds between registration (or rollout) and the steady window; "
                             "default: one heartbeat interval")
    parser.add_argument("--scrape-interval", type=float, default=15.0,
                        help="read /metrics this often, as a Prometheus would (0: never)")
    parser.add_argument("--processes", type=int, default=1, help="simulator processes")
    parser.add_argument("--replicas", type=int, default=1,
                        help="coordinator replicas on the one database (not with sqlite); "
                             "simulator process n talks to replica n modulo this")
    parser.add_argument("--register-concurrency", type=int, default=64,
                        help="registrations in flight per simulator process")
    parser.add_argument("--store", default="sqlite",
                        help="sqlite (a file in the coordinator's data dir), postgres (a "
                             "throwaway PostgreSQL 15 started here, as the tests start it: "
                             "fsync off) or the DSN of a database to use")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write a py-spy profile of the coordinator over the whole run here: a "
                             "flame graph if it ends in .svg, else collapsed stacks (needs "
                             "py-spy: pip install py-spy)")
    parser.add_argument("--dir", type=Path, default=None, help="where the coordinator's data goes")
    parser.add_argument("--serve-arg", action="append", default=[], dest="serve_args",
                        help="an argument for `coordinator serve` (repeatable), e.g. "
                             "--serve-arg=--gc-interval --serve-arg=0 for CPython's own GC")
    parser.add_argument("--two-connections", action="store_true",
                        help="agents of the protocol before polls counted as heartbeats: a "
                             "heartbeat on a second connection beside a poll parked 30 s")
    parser.add_argument("--quick", action="store_true",
                        help="a rollout of 1 manager and 4 workers, then 1 s of heartbeats "
                             "every 0.5 s: seconds")
    args = parser.parse_args()
    if args.quick:  # the steady window still holds polls that time out, and a scrape
        args.managers, args.workers, args.batch_size = 1, 4, 2
        args.heartbeat_interval, args.duration, args.warmup = 0.5, 1, 0.5
        args.scrape_interval = 0.5
    # Killed (e.g. by timeout): unwind, so the coordinator and the simulators are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.warmup is None:
        args.warmup = args.heartbeat_interval
    if args.replicas > 1 and args.store == "sqlite":
        parser.error("--replicas needs --store postgres (or a DSN): replicas share a database")
    rollout = bool(args.managers or args.workers)
    managers = [f"manager-{i:02d}" for i in range(args.managers)]
    workers = [f"worker-{i:05d}" for i in range(args.workers)]
    hostnames = managers + workers if rollout else [f"node-{i:05d}" for i in range(args.agents)]
    with contextlib.ExitStack() as stack:
        if args.store == "postgres":
            server = stack.enter_context(postgres_server())
            os.environ["COORDINATOR_STORE"] = stack.enter_context(server.database())
        elif args.store != "sqlite":
            os.environ["COORDINATOR_STORE"] = args.store  # `coordinator init` and `serve`
        run(args, rollout, managers, workers, hostnames)


def replica_of(served: ServedCoordinator, tmp: Path, serve_args: list[str],
               prefix: tuple[str, ...]) -> contextlib.AbstractContextManager[ServedCoordinator]:
    """Another replica of served on the same database, as docs/coordinator.md starts one: its
    own data dir with served's PKI, secrets key and admin token."""
    data = tmp / "coordinator-data"
    data.mkdir(parents=True)
    shutil.copytree(served.data / "pki", data / "pki")
    for name in ("secrets.key", "admin.token"):
        shutil.copy2(served.data / name, data / name)
    return running_coordinator(tmp, None, serve_args, prefix=prefix)


def run(args: argparse.Namespace, rollout: bool, managers: list[str], workers: list[str],
        hostnames: list[str]) -> None:
    serve_args = ["--register-rate", "0", "--register-rate-total", "0",
                  "--connections-per-address", "0", *args.serve_args]
    prefix = under_coordinator_limits()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        served = stack.enter_context(running_coordinator(
            Path(tmp), cluster_spec(args.batch_size, args.heartbeat_timeout), serve_args,
            prefix=prefix))
        replicas = [served] + [stack.enter_context(replica_of(
            served, Path(tmp) / f"replica-{n}", serve_args, prefix))
            for n in range(1, args.replicas)]
        print(f"coordinator under coordinator.service's limits: {' '.join(served.prefix)}"
              + (f"; {len(replicas)} replicas, the agents split between them"
                 if len(replicas) > 1 else ""))
        others = [Sampler(replica.pid) for replica in replicas[1:]]
        for sampler in others:
            sampler.start()
        token = served.admin.request("POST", f"/v1/clusters/{CLUSTER}/join-tokens",
                                     body={"ttl": "0"})["token"]
        sampler = Sampler(served.pid)
        sampler.start()
        scraper = Scraper(served.url, str(served.ca_file), args.scrape_interval)
        if args.scrape_interval > 0:
            scraper.start()
        profiler = None if args.profile is None else subprocess.Popen(
            [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(served.pid),
             "--output", str(args.profile), "--rate", "50", "--nonblocking",
             "--format", "flamegraph" if args.profile.suffix == ".svg" else "raw"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pipes: list[Connection] = []
        processes = []
        context = multiprocessing.get_context("spawn")
        for n in range(args.processes):
            mine, theirs = context.Pipe()
            plan = Plan(replicas[n % len(replicas)].url, str(served.ca_file), token,
                        hostnames[n::args.processes],
                        args.heartbeat_interval, args.register_concurrency,
                        args.two_connections)
            process = context.Process(target=simulate, args=(plan, theirs), daemon=True)
            process.start()
            processes.append(process)
            pipes.append(mine)
        started, cpu_started = time.monotonic(), sampler.cpu()
        for pipe in pipes:
            assert pipe.recv()[0] == "registered"
        registered = time.monotonic() - started
        register_cpu = sampler.cpu() - cpu_started
        print(f"registered {len(hostnames)} agents in {registered:.1f} s: "
              f"{len(hostnames) / registered:.0f}/s (coordinator CPU {register_cpu:.1f} s)")
        if rollout:
            gc_before = gc_pauses(served.url, str(served.ca_file))
            rollout_started, cpu_started = time.monotonic(), sampler.cpu()
            approve_all(served.url, str(served.ca_file), served.token_file.read_text().strip(),
                        managers, workers)
            finished = max(pipe.recv()[1] for pipe in pipes)  # each says "ready" once
            rollout_seconds = finished - rollout_started
            print(f"rollout of {args.managers} managers + {args.workers} workers "
                  f"(batches of {args.batch_size}): {rollout_seconds:.1f} s "
                  f"(coordinator CPU {sampler.cpu() - cpu_started:.1f} s)")
            print("  coordinator garbage collections during the rollout (generation: count, CPU "
                  "time, longest since start):",
                  gc_summary(gc_before, gc_pauses(served.url, str(served.ca_file))))
        gc_before = gc_pauses(served.url, str(served.ca_file))
        time.sleep(args.warmup)
        window_started, cpu_started, rss_started = time.monotonic(), sampler.cpu(), sampler.rss()
        others_started = [other.cpu() for other in others]
        time.sleep(args.duration)
        window = (window_started, time.monotonic())
        cpu, rss_ended = sampler.cpu() - cpu_started, sampler.rss()
        others_cpu = [other.cpu() - began for other, began in zip(others, others_started,
                                                                  strict=True)]
        # the agents' connections, mostly
        descriptors = [psutil.Process(replica.pid).num_fds() for replica in replicas]
        calls: list[tuple[float, str, float]] = []
        marks: list[tuple[float, str, str]] = []
        errors: dict[str, int] = defaultdict(int)
        client_cpu = 0.0
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes the graph and exits
            profiler.wait(timeout=60)
        for pipe in pipes:
            pipe.send("stop")
        for pipe in pipes:
            _, got_calls, got_marks, got_errors, got_cpu = pipe.recv()
            calls += got_calls
            marks += got_marks
            client_cpu += got_cpu
            for key, count in got_errors.items():
                errors[key] += count
        for process in processes:
            process.join(timeout=30)
        gc_after = gc_pauses(served.url, str(served.ca_file))
        for each in (sampler, *others):
            each.stopped.set()
        scraper.stopped.set()
        if scraper.is_alive():  # a scrape under way ends before the coordinator stops: one
            scraper.join()  # the stop cut read "Remote end closed connection without response"
        for t, seconds in scraper.scrapes:
            calls.append((t, f"/metrics (every {args.scrape_interval:g} s)", seconds))
        steady = defaultdict(list)
        everything = defaultdict(list)
        for t, endpoint, seconds in calls:
            everything[endpoint].append(seconds)
            if window[0] <= t <= window[1]:
                steady[endpoint].append(seconds)
        liveness = "heartbeats beside 30 s polls" if args.two_connections else "polls"
        print(f"steady window {args.duration:.0f} s, {liveness} every "
              f"{args.heartbeat_interval:g} s; coordinator CPU {cpu / args.duration * 100:.0f} % "
              f"of a core, {descriptors[0]} descriptors open, "
              f"peak RSS {sampler.peak_rss / 2**20:.0f} MiB (window: {rss_started / 2**20:.0f} → "
              f"{rss_ended / 2**20:.0f} MiB); simulator CPU "
              f"{client_cpu:.0f} s in {args.processes} process(es); load {os.getloadavg()[0]:.1f}")
        for n, (other, other_cpu) in enumerate(zip(others, others_cpu, strict=True), start=1):
            print(f"  replica {n + 1} ({replicas[n].url}): CPU "
                  f"{other_cpu / args.duration * 100:.0f} % of a core, {descriptors[n]} "
                  f"descriptors open, peak RSS {other.peak_rss / 2**20:.0f} MiB")
        print("  coordinator garbage collections from the warm-up to the end (generation: count, "
              "CPU time, longest since start):", gc_summary(gc_before, gc_after))
        if scraper.failed:
            print(f"  /metrics scrapes not answered: {len(scraper.failed)} ({scraper.failed[0]})")
        for label, table in (("steady window", steady), ("whole run", everything)):
            print(f"  {label}:")
            for endpoint, values in sorted(table.items()):
                print(f"    {endpoint:30s} n={len(values):7d}  p50 {ms(statistics.median(values)):>10s}"
                      f"  p99 {ms(percentile(values, 0.99)):>10s}  max {ms(max(values)):>10s}")
        if rollout:
            admissions = ordering(marks)
            gaps = [gap for _, gap in admissions]
            print(f"  ordering overhead over {len(gaps)} Deploy admissions: "
                  f"p50 {ms(statistics.median(gaps))}, p99 {ms(percentile(gaps, 0.99))}, "
                  f"max {ms(max(gaps))}")
            late = [f"{t - rollout_started:.2f} s: {ms(gap)}" for t, gap in admissions if gap > 0.1]
            print(f"  admissions over 100 ms (time since the approvals): {', '.join(late) or 'none'}")
        if errors:
            print("  errors:", dict(errors))
        print_complaints((Path(tmp) / "coordinator.log").read_text().splitlines())


def print_complaints(log: list[str], most: int = 5) -> None:
    """The coordinator's warnings and errors, the first few with their tracebacks."""
    complaints: list[list[str]] = []
    for line in log:
        if " WARNING " in line or " ERROR " in line:
            complaints.append([line])
        elif complaints and not line[:4].isdigit() and len(complaints) <= most:
            complaints[-1].append(line)  # a traceback's
    print(f"  coordinator warnings and errors: {len(complaints)}")
    for lines in complaints[:most]:
        print(*(f"    {line[:200]}" for line in lines), sep="\n")


if __name__ == "__main__":
    main()
