"""A real `nodeagent run` against a real coordinator: the daemon stays small (a phase's work
happens in a child that exits when the phase is done), keeps its connections to the
coordinator alive, a new assignment stops a running phase only when it changes what to
run, and a state dir has one agent at a time."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.agent import NODEAGENT, AgentProcess, agent_of
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# What a phase needs and the daemon must never have mapped: pydantic's compiled core and
# libyaml's binding (the config file and the assignment are validated in children).
PHASE_ONLY_LIBRARIES = ("pydantic_core", "yaml/_yaml")


def cluster(deploy: str, batch: int = 50, heartbeat_timeout: int = 30) -> str:
    return f"""\
name: lab
release: "1"
settings: {{workerBatchSize: {batch}, heartbeatTimeoutSeconds: {heartbeat_timeout}}}
machineTypes:
  manager:
    - {{name: marker, phase: prepare, action: {{type: file, path: /etc/lab/marker,
        content: "prepared\\n"}}}}
    - {deploy}
"""


QUICK = '{name: finish, phase: deploy, action: {type: exec, argv: ["true"]}}'
# Records its pid ($$$$: the shell's $$) and waits for a gate file that never comes.
BLOCKING = ('{name: finish, phase: deploy, action: {type: exec, argv: [sh, -c, '
            '"echo $$$$ > started; until [ -e gate ]; do sleep 0.1; done; touch finished"]}}')
# The same, counting its runs: a line with its pid in `runs` each time it starts.
COUNTED = BLOCKING.replace("> started", ">> runs")


def mapped(process: psutil.Process) -> str:
    return Path(f"/proc/{process.pid}/maps").read_text()


def approve(coordinator: ServedCoordinator) -> str:
    (machine,) = coordinator.admin.all_machines()
    coordinator.cli("approve", machine["id"], "--role", "manager")
    return str(machine["hostname"])


def test_the_daemon_stays_small_and_a_phase_gives_its_memory_back(tmp_path: Path) -> None:
    with running_coordinator(tmp_path, cluster(QUICK)) as coordinator, \
            agent_of(coordinator, tmp_path) as agent:
        waiting = mapped(agent)
        assert not [lib for lib in PHASE_ONLY_LIBRARIES if lib in waiting]
        coordinator.wait_state(approve(coordinator), "Ready", timeout=60)
        # The items were applied (by a child, under the agent's root)...
        assert (tmp_path / "root/etc/lab/marker").read_text() == "prepared\n"
        # ...and the child is gone, with all it loaded: the Ready daemon is as small as before.
        wait_until(lambda: not agent.children(), 30, "the phase's child to exit")
        ready = mapped(agent)
        assert not [lib for lib in PHASE_ONLY_LIBRARIES if lib in ready]
        assert agent.memory_info().rss < 36 * 2**20


def client_ports(coordinator: ServedCoordinator) -> set[int]:
    """The client ports of every TCP connection to the coordinator the kernel still knows,
    whoever holds it, including those closed lately (TIME_WAIT): one per connection made."""
    port = int(coordinator.url.rsplit(":", 1)[1])
    return {c.laddr.port for c in psutil.net_connections("tcp4")
            if c.raddr and c.raddr.port == port}


def test_an_agent_s_one_connection_is_its_heartbeat_and_a_killed_one_falls_silent(
        tmp_path: Path) -> None:
    """The long-poll is the agent's heartbeat (nodeagent/wire/heartbeat.py): an idle agent holds
    one TLS connection to the coordinator, never a new one (a handshake each time would cost
    the coordinator more than the answers), and stays responding through timeouts on polls
    alone; killed, it is declared not responding within one timeout."""
    timeout = 3
    with running_coordinator(tmp_path, cluster(QUICK, heartbeat_timeout=timeout)) as coordinator, \
            agent_of(coordinator, tmp_path) as agent:
        port = int(coordinator.url.rsplit(":", 1)[1])

        def held() -> list[Any]:
            return [c for c in agent.net_connections("tcp4") if c.raddr and c.raddr.port == port]
        # registered: its precheck report may have overlapped the first poll for a moment
        wait_until(lambda: len(held()) == 1, message="the agent's one connection")
        known = client_ports(coordinator)
        time.sleep(2 * timeout)  # six polls, 1 s apart: two timeouts
        assert client_ports(coordinator) - known == set()  # not a single new connection
        assert len(held()) == 1 and held()[0].status == psutil.CONN_ESTABLISHED
        (machine,) = coordinator.admin.all_machines()
        assert machine["responding"] and time.time() - machine["last_seen"] < 2.5
        events = coordinator.admin.request("GET", "/v1/events?cluster=lab")
        assert "not-responding" not in [e["kind"] for e in events]

        agent.kill()
        killed = time.monotonic()
        wait_until(lambda: not coordinator.admin.all_machines()[0]["responding"], 3 * timeout,
                   "the killed agent declared not responding", interval=0.2)
        # its last poll went out at most a second before the kill: silent a timeout after
        assert timeout - 1.5 < time.monotonic() - killed < timeout + 2.5


def test_only_a_change_in_what_to_run_stops_the_running_phase(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with running_coordinator(tmp_path, cluster(BLOCKING)) as coordinator, \
            agent_of(coordinator, tmp_path):
        hostname = approve(coordinator)
        started = root / "started"  # the shell creates it, then writes its pid
        wait_until(lambda: started.exists() and started.read_text().strip(), 60,
                   "the blocking item's pid")
        command = psutil.Process(int(started.read_text()))
        apply = tmp_path / "cluster.yaml"

        # A new generation, the same items: the running item is left alone.
        apply.write_text(cluster(BLOCKING, batch=10))
        coordinator.cli("cluster", "apply", "-f", str(apply))
        wait_until(lambda: "the running phase goes on" in (tmp_path / "agent.log").read_text(),
                   30, "the agent to see the new generation")
        assert command.is_running() and command.status() != psutil.STATUS_ZOMBIE

        # Another version of the item: the phase is stopped, its command killed, and the
        # new item runs instead.
        apply.write_text(cluster(QUICK.replace("finish,", "finish, version: '2',")))
        coordinator.cli("cluster", "apply", "-f", str(apply))
        coordinator.wait_state(hostname, "Ready", timeout=60)
        wait_until(lambda: not command.is_running(), message="the old command to be killed")
        assert not (root / "finished").exists()


def test_an_agent_restarted_while_pending_reports_its_prechecks_again(tmp_path: Path) -> None:
    """The operator may have fixed the host (more memory, say) and restarted the agent: only
    a new report tells the coordinator, which judges approval by the last one."""
    with running_coordinator(tmp_path, cluster(QUICK)) as coordinator:
        with agent_of(coordinator, tmp_path):
            pass  # registered with passing prechecks, then stopped
        assert not coordinator.admin.get("/v1/events?kind=precheck")
        with agent_of(coordinator, tmp_path):
            wait_until(lambda: bool(coordinator.admin.get("/v1/events?kind=precheck")), 60,
                       "the restarted agent's precheck report")
        (event,) = coordinator.admin.get("/v1/events?kind=precheck")
        assert event["message"].endswith("prechecks now pass")


def test_a_second_agent_on_a_state_dir_is_refused_and_a_killed_ones_is_not(
        tmp_path: Path) -> None:
    """Two agents on one state dir would be one machine running its items twice; the second
    is refused, naming the first. A kill -9 leaves no lock behind: the next start waits only
    for the killed agent's phase child to stop its item, then runs the interrupted item."""
    root = tmp_path / "root"
    runs = root / "runs"
    with running_coordinator(tmp_path, cluster(COUNTED)) as coordinator, \
            agent_of(coordinator, tmp_path) as first:
        hostname = approve(coordinator)
        wait_until(lambda: runs.exists() and runs.read_text().endswith("\n"), 60,
                   "the item to start")

        second = subprocess.run([NODEAGENT, "run", "--config", str(tmp_path / "agent.yaml"),
                                 "--root", str(root)], capture_output=True, text=True,
                                timeout=30)
        assert second.returncode == 1 and "Traceback" not in second.stderr
        assert (f"another agent (pid {first.pid}) is running on {root}/var/lib/nodeagent; stop "
                "it first (systemctl stop nodeagent)") in second.stderr
        assert first.is_running()
        (command,) = runs.read_text().split()  # the item ran once, and is running still
        # The phase's child holds the lock with its daemon; the item's command does not.
        (child,) = (c for c in first.children() if "apply" in c.cmdline())
        assert [f for f in child.open_files() if f.path.endswith("/agent.lock")]
        assert not [f for f in psutil.Process(int(command)).open_files()
                    if f.path.endswith("/agent.lock")]

        # The killed agent's child, held stopped, still holds the state dir: a new agent
        # waits for it rather than run the item beside the old run.
        child.suspend()
        first.kill()
        first.wait(10)
        restarted = AgentProcess(tmp_path)
        restarted.start()
        try:
            wait_until(lambda: f"the agent (pid {first.pid}) that ran on" in
                       restarted.log.read_text(), 30, "the restarted agent to wait")
            time.sleep(1)  # time to run the item beside the old run, were it to
            assert restarted.process is not None and restarted.process.poll() is None
            assert runs.read_text().split() == [command]
            child.resume()  # it sees its daemon gone, stops the item and exits
            wait_until(lambda: len(runs.read_text().split()) == 2, 60,
                       "the restarted agent to run the interrupted item")
            assert not psutil.pid_exists(int(command))
            (root / "gate").touch()
            coordinator.wait_state(hostname, "Ready", timeout=60)
        finally:
            restarted.stop()


def test_a_state_dir_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    config = tmp_path / "agent.yaml"
    config.write_text(f"coordinator: {{url: 'http://127.0.0.1:9'}}\njoinToken: x\n"
                      f"stateDir: {tmp_path}/file/state\n")
    run = subprocess.run([NODEAGENT, "run", "--config", str(config)], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"error: cannot lock the state dir {tmp_path}/file/state: Not a directory" \
        in run.stderr
