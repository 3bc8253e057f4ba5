"""`coordinator backup` and `coordinator restore` end to end: real `nodeagent run` daemons
Ready on a served coordinator (SQLite), a backup taken while they heartbeat and an operator
keeps writing, the coordinator lost, and its backup restored into a fresh data dir and then
into PostgreSQL and served on the same address. Each restored coordinator holds the same
clusters, machines, tokens and history; the old admin token and a join string made before the
backup still work; the agents come back with their own identities and journals and run
nothing again. A damaged or newer archive is refused, with nothing written."""

from __future__ import annotations

import contextlib
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.service.snapshot import SCHEMA_VERSION, read_archive
from tests.support.agent import AgentProcess, joined_agent
from tests.support.archives import repacked
from tests.support.builders import AUTO_APPROVE_CLUSTER
from tests.support.harness import COORDINATOR, ServedCoordinator, restore, running_coordinator
from tests.support.metrics import metric, scrape
from tests.support.postgres import Postgres
from tests.support.requirements import require_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AGENTS = 3
SETTINGS = "heartbeatSeconds: 1"  # joined_agent ignores the prechecks
# What a machine's view says that its agent's heartbeats do not change.
STEADY = ("id", "cluster", "hostname", "ip", "state", "role", "labels", "approved",
          "state_since", "items", "progress", "release", "managers")


def connected(served: ServedCoordinator) -> int:
    """Agents whose long-poll the coordinator holds now."""
    return int(metric(scrape(served), "nodeagent_agents_connected") or 0)


@contextlib.contextmanager
def ready_fleet(served: ServedCoordinator, tmp: Path) -> Iterator[list[AgentProcess]]:
    require_root()
    fleet = []
    try:
        for index in range(AGENTS):
            fleet.append(joined_agent(served, tmp / f"agent-{index}", f"node-{index}", SETTINGS))
        wait_until(lambda: len(served.admin.all_machines()) == AGENTS, 60, "registrations")
        for agent in fleet:
            served.wait_state(str(agent.hostname), "Ready", timeout=120)
        yield fleet
    finally:
        for agent in fleet:
            if agent.process is not None and agent.process.poll() is None:
                agent.stop()


def events(served: ServedCoordinator) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while page := served.admin.get(f"/v1/events?after_id={found[-1]['id'] if found else 0}"
                                   "&limit=1000"):
        found += page
    return found


def state(served: ServedCoordinator) -> dict[str, Any]:
    """What an operator sees of the coordinator, without what heartbeats move."""
    return {"clusters": served.admin.get("/v1/clusters"),
            "machines": [{key: m.get(key) for key in STEADY}
                         for m in served.admin.all_machines()],
            "admin_tokens": served.admin.get("/v1/admin-tokens")}


@contextlib.contextmanager
def writing(served: ServedCoordinator) -> Iterator[None]:
    """An operator making join tokens (each one audited) in a loop, beside the heartbeats."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            served.admin.request("POST", "/v1/clusters/lab/join-tokens", body={})

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def journals(fleet: list[AgentProcess]) -> dict[str, bytes]:
    return {str(a.hostname): (a.state_dir / "journal.json").read_bytes() for a in fleet}


def check_restored(served: ServedCoordinator, before: dict[str, Any], archive: Path,
                   history: list[dict[str, Any]], fleet: list[AgentProcess],
                   ran: dict[str, bytes]) -> None:
    """The restored coordinator holds what the backup did, and its agents are back, Ready,
    having run nothing again."""
    snapshot = read_archive(archive)
    assert state(served) == before
    assert [t["id"] for t in served.admin.get("/v1/join-tokens")] == \
        [row["id"] for row in snapshot.tables["join_tokens"]]
    archived = [row["id"] for row in snapshot.tables["events"]]
    restored = events(served)
    assert [e["id"] for e in restored[:len(archived)]] == archived
    assert restored[:len(archived)] == [e for e in history if e["id"] <= archived[-1]]
    wait_until(lambda: connected(served) == AGENTS, 60, "every agent's long-poll again",
               interval=0.2)
    for agent in fleet:
        served.wait_state(str(agent.hostname), "Ready", timeout=30)
        assert agent.process is not None and agent.process.poll() is None
    later = [e for e in events(served) if e["id"] > archived[-1]]
    assert [e for e in later if e["kind"] == "item"] == []
    assert journals(fleet) == ran
    assert [m["responding"] for m in served.admin.all_machines()] == [True] * AGENTS


def test_a_backup_under_load_restores_into_sqlite_and_postgresql_and_the_agents_carry_on(
        tmp_path: Path, postgres: Postgres) -> None:
    archive = tmp_path / "backup.tgz"
    with running_coordinator(tmp_path / "a", AUTO_APPROVE_CLUSTER) as source, \
            ready_fleet(source, tmp_path) as fleet:
        kept_join = source.cli("join-token", "create", "lab").stdout.strip()
        with writing(source):
            wait_until(lambda: len(source.admin.get("/v1/join-tokens")) > AGENTS + 5, 30,
                       "the operator's writes under way")
            taken = source.cli("backup", "--out", str(archive), timeout=120)
        assert stat.S_IMODE(archive.stat().st_mode) == 0o600
        assert f"{archive}: " in taken.stdout and f"{AGENTS} machines" in taken.stdout
        before, history, ran = state(source), events(source), journals(fleet)
        admin_token = source.token_file.read_text()
        source.stop(crash=True)  # the disk is lost

        # Into a new data dir (SQLite), served where the old one was.
        restored = tmp_path / "b" / "coordinator-data"
        done = restore(archive, restored)
        assert done.returncode == 0, done.stderr
        assert f"{AGENTS} machines" in done.stdout
        assert not (restored / "admin.token").exists()
        (restored / "admin.token").write_text(admin_token)  # the operator's, kept elsewhere
        again = ServedCoordinator(source.url, restored, tmp_path / "b" / "coordinator.log")
        again.start()
        try:
            check_restored(again, before, archive, history, fleet, ran)
            # Restoring over it is refused, and it holds what it held.
            refused = restore(archive, restored)
            assert refused.returncode == 1
            assert "already holds a coordinator's files" in refused.stderr
            # A join string made before the backup still registers a machine.
            newcomer = AgentProcess(tmp_path / "newcomer", hostname="node-new")
            newcomer.root.mkdir(parents=True)
            newcomer.configure(f"join: {kept_join}\nignorePrechecks: [all]\n{SETTINGS}")
            newcomer.start()
            try:
                wait_until(lambda: len(again.admin.all_machines()) > AGENTS, 60,
                           "the newcomer's registration")
                again.wait_state("node-new", "Ready", timeout=120)
            finally:
                newcomer.stop()
        finally:
            again.stop()

        # The same backup into PostgreSQL: how a SQLite coordinator moves to replicas.
        with postgres.database() as dsn:
            moved = tmp_path / "c" / "coordinator-data"
            done = restore(archive, moved, "--store", dsn)
            assert done.returncode == 0, done.stderr
            (moved / "admin.token").write_text(admin_token)
            replica = ServedCoordinator(source.url, moved, tmp_path / "c" / "coordinator.log",
                                        ("--store", dsn))
            replica.start()
            try:
                check_restored(replica, before, archive, history, fleet, ran)
            finally:
                replica.stop()


def test_a_restore_says_the_url_its_agents_reach_it_at(tmp_path: Path) -> None:
    """The backup records the URL agents reach the coordinator at: the restore's `start it
    with` gives it, and the port to listen on, rather than leaving them to be guessed."""
    archive = tmp_path / "backup.tgz"
    with running_coordinator(tmp_path / "a", AUTO_APPROVE_CLUSTER) as source:
        source.cli("backup", "--out", str(archive))
    done = restore(archive, tmp_path / "b")
    assert done.returncode == 0, done.stderr
    port = source.url.rsplit(":", 1)[1]
    assert (f"start it with:   coordinator serve --data-dir {tmp_path / 'b'} --listen "
            f"ADDRESS:{port} --advertise-url {source.url}\n") in done.stdout, done.stdout


def test_a_damaged_or_newer_backup_is_refused_with_nothing_written(tmp_path: Path) -> None:
    archive = tmp_path / "backup.tgz"
    with running_coordinator(tmp_path / "a") as source:
        source.cli("backup", "--out", str(archive))
        reader = source.cli("admin-token", "create", "dashboard", "--role", "read-only")
        token = reader.stdout.strip()
        refused = subprocess.run(
            [COORDINATOR, "--url", source.url, "--token", token, "--ca", str(source.ca_file),
             "backup", "--out", str(tmp_path / "denied.tgz")],
            capture_output=True, text=True, timeout=30, check=False)
        assert refused.returncode == 1 and "read-only" in refused.stderr, refused.stderr
        assert not (tmp_path / "denied.tgz").exists()
    data = archive.read_bytes()
    middle = len(data) // 2
    cases = {
        "flipped": (data[:middle] + bytes([data[middle] ^ 0x40]) + data[middle + 1:],
                    "is damaged: "),
        "truncated": (data[:len(data) * 2 // 3], "is damaged: "),
        "newer": (repacked(data, schema_version=99),
                  f"has schema version 99, newer than this coordinator reads "
                  f"({SCHEMA_VERSION}): restore it with a coordinator at least as new as the "
                  "one that took it"),
    }
    for name, (content, message) in cases.items():
        bad = tmp_path / f"{name}.tgz"
        bad.write_bytes(content)
        target = tmp_path / f"restored-{name}"
        done = restore(bad, target)
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        assert done.stderr.startswith(f"error: {bad} ") and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert not target.exists(), name
