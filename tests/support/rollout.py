"""A cluster rolled out by real agents: a LAN of network namespaces, the coordinator (one
process, or several replicas on one PostgreSQL database) in the hub namespace over HTTPS, and
one nodeagent per node namespace with its own hostname and root; plus the check that the
event history kept the ordering invariants."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.harness import ServedCoordinator
from tests.support.lan import HUB_IP, Lan, Node, lan
from tests.support.ports import free_port
from tests.support.roots import passing_root
from tests.support.waiting import wait_until

BIN = Path(sys.executable).parent
MANAGERS = ["m1", "m2", "m3"]
WORKERS = ["w1", "w2", "w3", "w4", "w5"]
BATCH = 2

# Every exec appends its item's name to var/log/items.log (relative to the agent's root,
# where exec runs): each line must appear exactly once in the end. Deploy items wait for a
# gate file in the root, so a test decides when they may finish.
SPEC = """\
name: lab
release: "1.0"
settings:
  workerBatchSize: 2
  heartbeatTimeoutSeconds: 20
  retry: {{baseSeconds: 0.2, maxSeconds: 1}}
machineTypes:
{types}
"""
ROLE_ITEMS = """\
  {role}:
    - name: node-env
      phase: prepare
      action:
        type: file
        path: /etc/lab/node.env
        template: "NODE=${{machine.hostname}}\\nROLE=${{machine.role}}\\nMANAGER=${{managers.first}}\\n"
    - name: prepare-{role}
      phase: prepare
      action:
        type: exec
        argv: [sh, -c, 'mkdir -p var/log && echo "$1" >> var/log/items.log', sh, prepare-{role}]
    - name: deploy-{role}
      phase: deploy
      timeout: 30
      action:
        type: exec
        argv: [sh, -c, 'until [ -e gate ]; do sleep 0.1; done; echo "$1" >> var/log/items.log',
               sh, deploy-{role}]
"""


def spec(extra_items: str = "", manager_items: str = "") -> str:
    """The cluster spec; extra_items (a template of {role}) adds items to each role,
    manager_items (as written) to the managers."""
    return SPEC.format(types="".join(
        (ROLE_ITEMS + extra_items).format(role=r) + (manager_items if r == "manager" else "")
        for r in ("manager", "worker")))


@dataclass
class Fleet:
    lan: Lan
    tmp: Path
    replicas: list[ServedCoordinator]  # in the hub namespace, on one data dir (and store)
    managers: Sequence[str] = tuple(MANAGERS)  # hostnames, in registration order
    workers: Sequence[str] = tuple(WORKERS)
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    cluster: str = "lab"  # the spec's name
    env: dict[str, str] = field(default_factory=dict)  # added to every agent's environment
    join_string: str = ""  # what the fleet's agents registered with

    @property
    def hostnames(self) -> list[str]:
        return [*self.managers, *self.workers]

    @property
    def ports(self) -> list[int]:
        return [replica.port for replica in self.replicas]

    @property
    def coordinator(self) -> ServedCoordinator:
        """Where admin commands go: the first replica still running."""
        return next(replica for replica in self.replicas if replica.running)

    def kill_replica(self, pid: int) -> None:
        """kill -9 the coordinator replica with this pid."""
        (replica,) = [r for r in self.replicas if r.pid == pid]
        replica.stop(crash=True)

    def admin(self, *args: str) -> str:
        return self.coordinator.cli(*args).stdout

    def admin_json(self, *args: str) -> Any:
        return self.coordinator.cli_json(*args)

    def node(self, hostname: str) -> Node:
        return next(n for n in self.lan.nodes if n.hostname == hostname)

    def root(self, hostname: str) -> Path:
        return self.tmp / "roots" / hostname

    def open_gate(self, hostname: str) -> None:
        (self.root(hostname) / "gate").touch()

    def start_agent(self, hostname: str, join: str) -> None:
        """The agent's config holds nothing about the coordinator but the join string: URL,
        token and the CA's hash, which the agent checks before trusting the coordinator."""
        root = self.root(hostname)
        if not root.exists():
            passing_root(root, hostname)
        config = self.tmp / f"{hostname}.yaml"
        others = [f"https://{HUB_IP}:{port}" for port in self.ports[1:]]  # the join has the first
        config.write_text(
            f"join: {join}\ncoordinator: {{timeout: 5, urls: {json.dumps(others)}}}\n"
            f"stateDir: {root}/var/lib/nodeagent\n"
            # Eight agents start at once on a small machine: give the checks room.
            "heartbeatSeconds: 1\nthresholds: {checkTimeout: 15}\n")
        log = (self.tmp / f"{hostname}.log").open("ab")
        self.agents[hostname] = self.node(hostname).ns.popen(
            [str(BIN / "nodeagent"), "run", "--config", str(config), "--root", str(root)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})

    def join(self, hostname: str, role: str = "worker") -> None:
        """A late machine's agent started now with a join string of its own, and approved as
        role."""
        self.start_agent(hostname, self.admin("join-token", "create", self.cluster).strip())
        self.open_gate(hostname)
        self.wait_for(f"{hostname} registered", lambda: hostname in {
            m["hostname"] for m in self.admin_json("machines")})
        self.admin("approve", hostname, "--role", role)

    def kill_node(self, hostname: str) -> None:
        """kill -9 the agent and everything it started, as systemd does to a unit's cgroup."""
        ns = self.node(hostname).ns.name
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                  check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        self.agents[hostname].wait(timeout=10)

    def wait_for(self, what: str, predicate: Any, timeout: float = 90) -> Any:
        """wait_until, failing with the tail of every log of the fleet. Once a second: most
        predicates run the CLI in the hub's namespace, a process each, whose CPU a loaded
        machine's fleet needs more than the test needs an answer sooner."""
        def logs() -> str:
            tails = {p.name: p.read_text()[-1500:] for p in self.tmp.glob("*.log")}
            return f"{what} (logs: {tails})"

        return wait_until(predicate, timeout, logs, interval=1.0)

    def events(self) -> list[dict[str, Any]]:
        out = self.admin("events", "--cluster", self.cluster, "--output", "json")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


# Starts what the agents need beside the coordinator on the LAN (stopped by the stack), and
# returns what to add to their environment.
AgentEnv = Callable[[Lan, contextlib.ExitStack], dict[str, str]]


@contextlib.contextmanager
def fleet(tmp_path: Path, closed_gates: tuple[str, ...] = (), store: str | None = None,
          replicas: int = 1, managers: Sequence[str] = tuple(MANAGERS),
          workers: Sequence[str] = tuple(WORKERS), cluster_spec: str | None = None,
          late: tuple[str, ...] = (), agent_env: AgentEnv | None = None,
          pool: bool = False, serve_args: Sequence[str] = ()) -> Iterator[Fleet]:
    """The cluster (cluster_spec, default spec()) with every machine registered and approved.
    With store (a PostgreSQL DSN reachable from the hub namespace), `replicas` coordinators
    share it and the data dir. `late` workers have a node on the LAN but no agent until the
    test has them join. agent_env starts services for the agents and gives their environment.
    With pool, the machines (workers, then) register into the pool with a join token that
    approves them, and the cluster claims them as its spec says (Fleet.join_string).
    serve_args go to every replica's `serve` (given here, not by a restart that costs seconds)."""
    cluster_spec = cluster_spec or spec()
    with lan([*managers, *workers, *late]) as network, contextlib.ExitStack() as stack:
        # HTTPS, as in production: agents reach it at the hub's address on the LAN.
        shared = ("--store", store) if store else ()
        running = Fleet(network, tmp_path, [], managers, workers,
                        cluster=yaml.safe_load(cluster_spec)["name"],
                        env=agent_env(network, stack) if agent_env else {})
        for index in range(replicas):
            port = free_port()
            advertised = ("--advertise-url", f"https://{HUB_IP}:{port}")
            running.replicas.append(ServedCoordinator(
                f"https://127.0.0.1:{port}", tmp_path / "coordinator",
                tmp_path / ("coordinator.log" if index == 0 else f"coordinator-{index}.log"),
                (*shared, *advertised, *serve_args), tuple(network.hub.argv([])),
                listen="0.0.0.0"))
            if index == 0:
                running.replicas[0].init(*shared, "--name", HUB_IP, *advertised)
        for replica in running.replicas:  # each up (the first so leading) before the next
            replica.start()
            stack.callback(replica.stop)
        (tmp_path / "cluster.yaml").write_text(cluster_spec)
        running.admin("cluster", "apply", "-f", str(tmp_path / "cluster.yaml"))
        token = running.admin("join-token", "create", *(
            ("--pool", "--auto-approve") if pool else (running.cluster,))).strip()
        running.join_string = token

        def registered() -> set[str]:
            return {m["hostname"] for m in running.admin_json("machines")}

        # The workers start with the first manager: their start-up and prechecks overlap the
        # managers' registrations, which the planner deploys in registration order and the
        # tests name in it (m1 first), so each manager starts once the one before registered.
        for hostname in [*managers[:1], *workers, *managers[1:]]:
            running.start_agent(hostname, token)
            if hostname not in closed_gates:
                running.open_gate(hostname)
            if hostname in managers:
                running.wait_for(f"{hostname} registered", lambda h=hostname: h in registered())
        total = len(running.hostnames)
        running.wait_for(f"{total} registrations", lambda: len(registered()) == total)
        if pool:
            yield running
            return
        # The first manager to finish Prepare deploys first, and under load m2 can finish
        # before m1: m1 (which the tests expect first) is approved alone until it is past
        # Prepare, then the other managers in order; the workers, whose order nothing depends
        # on, all at once.
        first, *others = managers
        running.admin("approve", first, "--role", "manager")
        running.wait_for(f"{first} past Prepare", lambda: running.admin_json(
            "machines", "get", first)["state"] in ("Deploy", "Ready"))
        for hostname in others:
            running.admin("approve", hostname, "--role", "manager")
        with ThreadPoolExecutor(max(len(workers), 1)) as pool:
            list(pool.map(lambda h: running.admin("approve", h, "--role", "worker"), workers))
        yield running


def all_ready(f: Fleet) -> bool:
    status = f.admin_json("status", f.cluster)
    return status["counts"] == {"Ready": len(f.hostnames)}


def assert_ordering_held(events: list[dict[str, Any]]) -> None:
    """Replay the state changes in order; the invariants hold after every one."""
    deploying: set[str] = set()
    deployed_managers: set[str] = set()
    seen_states: dict[str, list[str]] = {}
    for event in events:
        if event["kind"] != "state":
            continue
        host, to = event["hostname"], event["data"]["to"]
        seen_states.setdefault(host, [event["data"]["from"]]).append(to)
        if to == "Deploy":
            deploying.add(host)
        elif host in deploying:
            deploying.discard(host)
            if to == "Ready" and host in MANAGERS:
                deployed_managers.add(host)
        managers = deploying & set(MANAGERS)
        workers = deploying & set(WORKERS)
        assert len(managers) <= 1, f"two managers deploying at once: {managers}"
        if not deployed_managers:
            assert not workers, f"workers {workers} deployed before the first manager was Ready"
            assert len(deploying) <= 1, f"the first manager did not deploy alone: {deploying}"
        assert len(workers) <= BATCH, f"more than {BATCH} workers deploying: {workers}"
    for host, states in seen_states.items():
        assert states == ["Pending", "Prepare", "Deploy", "Ready"], (host, states)


def item_log(f: Fleet, hostname: str) -> list[str]:
    return (f.root(hostname) / "var/log/items.log").read_text().split()


def state_history(events: list[dict[str, Any]]) -> Iterator[dict[str, str]]:
    """Every machine's state after each state change, in the order they were recorded."""
    states: dict[str, str] = {}
    for event in events:
        if event["kind"] == "state":
            states[event["hostname"]] = event["data"]["to"]
            yield states
