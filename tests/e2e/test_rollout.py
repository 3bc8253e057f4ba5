"""A coordinator and 8 agents (3 managers, 5 workers), each agent in its own network namespace
with its own hostname, rolling a cluster out to Ready; the event history must show the
ordering invariants held. Then again with one agent killed -9 mid-item and restarted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.lan import HUB_IP, Lan, Node, lan
from tests.support.roots import passing_root

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


def spec() -> str:
    return SPEC.format(types="".join(ROLE_ITEMS.format(role=r) for r in ("manager", "worker")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Fleet:
    lan: Lan
    tmp: Path
    url: str
    data: Path
    agents: dict[str, subprocess.Popen[bytes]]

    @property
    def token_file(self) -> Path:
        return self.data / "admin.token"

    def _admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.lan.hub.run([str(BIN / "coordinator"), "--url", self.url, "--token-file",
                                 str(self.token_file), "--ca", str(self.data / "pki" / "ca.crt"),
                                 *args])

    def admin(self, *args: str) -> str:
        result = self._admin(*args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def admin_ok(self, *args: str) -> bool:
        return self._admin(*args).returncode == 0

    def admin_json(self, *args: str) -> Any:
        return json.loads(self.admin(*args, "--output", "json"))

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
        config.write_text(
            f"join: {join}\ncoordinator: {{timeout: 5}}\nstateDir: {root}/var/lib/nodeagent\n"
            # Eight agents start at once on a small machine: give the checks room.
            "heartbeatSeconds: 1\nthresholds: {checkTimeout: 15}\n")
        log = (self.tmp / f"{hostname}.log").open("ab")
        self.agents[hostname] = self.node(hostname).ns.popen(
            [str(BIN / "nodeagent"), "run", "--config", str(config), "--root", str(root)],
            stdout=log, stderr=subprocess.STDOUT)

    def kill_node(self, hostname: str) -> None:
        """kill -9 the agent and everything it started, as systemd does to a unit's cgroup."""
        ns = self.node(hostname).ns.name
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                  check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        self.agents[hostname].wait(timeout=10)

    def wait_for(self, what: str, predicate: Any, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.3)
        logs = {p.name: p.read_text()[-1500:] for p in self.tmp.glob("*.log")}
        raise AssertionError(f"timed out waiting for {what}; last: {last}; logs: {logs}")

    def events(self) -> list[dict[str, Any]]:
        out = self.admin("events", "--cluster", "lab", "--output", "json")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


@contextlib.contextmanager
def fleet(tmp_path: Path, closed_gates: tuple[str, ...] = ()) -> Iterator[Fleet]:
    with lan(MANAGERS + WORKERS) as network:
        port = free_port()
        data = tmp_path / "coordinator"
        coordinator_log = (tmp_path / "coordinator.log").open("wb")
        # HTTPS, as in production: agents reach it at the hub's address on the LAN.
        advertise = ["--listen", f"0.0.0.0:{port}", "--advertise-url", f"https://{HUB_IP}:{port}"]
        initialized = network.hub.run([str(BIN / "coordinator"), "init", "--data-dir", str(data),
                                       "--name", HUB_IP, "--name", "127.0.0.1", *advertise])
        assert initialized.returncode == 0, initialized.stderr
        network.hub.popen([str(BIN / "coordinator"), "serve", "--data-dir", str(data), *advertise],
                          stdout=coordinator_log, stderr=subprocess.STDOUT)
        running = Fleet(network, tmp_path, f"https://127.0.0.1:{port}", data, {})
        running.wait_for("the coordinator", lambda: running.token_file.exists()
                         and running.admin_ok("cluster", "get"), timeout=30)
        (tmp_path / "cluster.yaml").write_text(spec())
        running.admin("cluster", "apply", "-f", str(tmp_path / "cluster.yaml"))
        token = running.admin("join-token", "create", "lab").strip()
        for hostname in MANAGERS + WORKERS:
            running.start_agent(hostname, token)
            if hostname not in closed_gates:
                running.open_gate(hostname)
        running.wait_for("8 registrations", lambda: len(running.admin_json("machines")) == 8)
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            running.admin("approve", hostname, "--role", role)
        yield running


def all_ready(f: Fleet) -> bool:
    status = f.admin_json("status", "lab")
    return status["counts"] == {"Ready": 8}


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


def test_eight_agents_roll_out_to_ready_in_order(tmp_path: Path) -> None:
    with fleet(tmp_path) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f))
        assert_ordering_held(f.events())
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname) == [f"prepare-{role}", f"deploy-{role}"]
            env = (f.root(hostname) / "etc/lab/node.env").read_text()
            assert f"NODE={hostname}\nROLE={role}\n" in env
        machines = {m["hostname"]: m for m in f.admin_json("machines")}
        assert machines["w1"]["ip"] == f.node("w1").ip  # the default-route address
        table = f.admin("status", "lab")
        assert "8 Ready" in table and "w5" in table


def test_an_agent_killed_mid_item_resumes_and_applies_every_item_once(tmp_path: Path) -> None:
    with fleet(tmp_path, closed_gates=("w1",)) as f:
        def w1_deploying() -> bool:
            return any(e["kind"] == "item" and e["hostname"] == "w1"
                       and e["data"]["item"] == "deploy-worker"
                       and e["data"]["status"] == "running" for e in f.events())

        f.wait_for("w1 running its deploy item", w1_deploying)
        f.kill_node("w1")
        token = f.admin("join-token", "create", "lab").strip()
        f.start_agent("w1", token)  # same state dir: it must not register again
        f.open_gate("w1")
        f.wait_for("every machine Ready", lambda: all_ready(f))
        assert_ordering_held(f.events())
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname) == [f"prepare-{role}", f"deploy-{role}"], hostname
        registrations = [e for e in f.events() if e["kind"] == "registered"]
        assert len(registrations) == 8
        attempts = [e["data"]["attempt"] for e in f.events() if e["kind"] == "item"
                    and e["hostname"] == "w1" and e["data"]["item"] == "deploy-worker"
                    and e["data"]["status"] == "running"]
        assert len(attempts) == 2  # the interrupted run, and the resumed one
