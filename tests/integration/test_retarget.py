"""Agents follow their coordinator when it moves (issue 22, part 3), through their own
assignment: two real `coordinator serve` processes on loopback (the second from a copy of the
first's data dir, as a restore makes it: same CA, same machines and credentials) and real
`nodeagent run` daemons. Set on the old coordinator (PUT /v1/move-target), the target is
checked (its CA against the pin, then that it knows the machine's credential) before an agent
switches; the switch keeps identity and journal, survives a restart, and is undone when the
move is rolled back and the target goes away."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.server.datadir import DATABASE
from coordinator.store.sqlite import SQLiteStore
from nodeagent.wire.joinstring import ca_hash
from tests.support.agent import AgentProcess, joined_agent
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.metrics import polls_parked
from tests.support.requirements import require_root
from tests.support.rogue import rogue_server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

CLUSTER = """\
name: lab
release: "1"
settings: {autoApprove: true, autoApproveRole: worker}
machineTypes:
  worker:
    - {name: noop, phase: prepare, action: {type: exec, argv: ["true"]}}
"""
AGENTS = 2
SWITCH_SECONDS = 15  # "within seconds", with room for a shared 2-core machine
FALLBACK_SECONDS = 3  # coordinator.fallbackSeconds: how long a moved-to coordinator may be silent


def pin(served: ServedCoordinator) -> str:
    return ca_hash(served.ca_file.read_text())


def item_events(served: ServedCoordinator, status: str) -> list[dict]:
    """The item reports of this status: a "running" one is an item (re-)started; a journaled
    item is reported "succeeded" (already applied) without running."""
    return [e for e in served.admin.get("/v1/events?kind=item&limit=1000")
            if e["data"].get("status") == status]


def home(agent: AgentProcess) -> dict | None:
    path = agent.state_dir / "coordinator.json"
    return json.loads(path.read_text()) if path.exists() else None


def following(agent: AgentProcess, served: ServedCoordinator) -> bool:
    current = home(agent)
    return current is not None and current["current"]["urls"][0] == served.url


def seen_by(served: ServedCoordinator, since: float) -> set[str]:
    """Hostnames of the machines whose agents the coordinator heard from after `since`."""
    return {m["hostname"] for m in served.admin.all_machines() if m["last_seen"] > since}


@contextlib.contextmanager
def fleet(served: ServedCoordinator, tmp: Path,
          settings: str = "") -> Iterator[list[AgentProcess]]:
    """AGENTS agents, each with a hostname of its own and these settings (YAML), their
    prepare item applied."""
    require_root()
    agents = []
    try:
        for index in range(AGENTS):
            agents.append(joined_agent(served, tmp / f"agent-{index}", f"node-{index}",
                                       f"heartbeatSeconds: 0.5\n{settings}"))
        wait_until(lambda: len(item_events(served, "succeeded")) == AGENTS,
                   90, "every agent's item applied", interval=0.3)
        yield agents
    finally:
        for agent in agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.stop()


def copy_data(old: ServedCoordinator, to: Path, whole: bool = True) -> None:
    """The old coordinator's data dir (or only its PKI: a fresh coordinator with the same CA)
    copied to `to`/coordinator-data while it is stopped, as a restore would make it."""
    old.stop()
    try:
        target = to / "coordinator-data"
        shutil.rmtree(target, ignore_errors=True)
        if whole:
            shutil.copytree(old.data, target)
        else:
            target.mkdir(parents=True)
            shutil.copytree(old.data / "pki", target / "pki")
            shutil.copy(old.token_file, target / "admin.token")
    finally:
        old.start()


def store_move_target(served: ServedCoordinator, target: dict) -> None:  # type: ignore[type-arg]
    """target written into served's store as a coordinator of an older version accepted it,
    unchecked (served stopped meanwhile, then started again)."""
    async def write() -> None:
        store = SQLiteStore(served.data / DATABASE)
        await store.open()
        try:
            await store.set_move_target(json.dumps(target))
        finally:
            await store.close()

    served.stop()
    try:
        asyncio.run(write())
    finally:
        served.start()


def logs(agents: list[AgentProcess]) -> str:
    return "\n".join(agent.log.read_text() for agent in agents)


def test_agents_move_to_the_target_keeping_identity_and_journal_and_come_back_on_rollback(
        tmp_path: Path) -> None:
    with running_coordinator(tmp_path / "old", CLUSTER) as old, \
            fleet(old, tmp_path, f"coordinator: {{fallbackSeconds: {FALLBACK_SECONDS}}}") \
            as agents:
        identities = [(a.state_dir / "identity.json").read_text() for a in agents]
        journals = [(a.state_dir / "journal.json").read_bytes() for a in agents]
        copy_data(old, tmp_path / "new")
        with running_coordinator(tmp_path / "new", None) as new:
            started = item_events(new, "running")
            answer = old.admin.request("PUT", "/v1/move-target",
                                       body={"url": new.url, "caPin": pin(new)})
            assert answer["urls"] == [new.url] and answer["ca_pin"] == pin(new)
            assert old.admin.get("/v1/move-target")["urls"] == [new.url]
            wait_until(lambda: all(following(a, new) for a in agents), SWITCH_SECONDS,
                       lambda: "every agent following the new coordinator\n" + logs(agents))
            # Their long-polls move at once, not when the old one's poll ends (up to 30 s).
            wait_until(lambda: polls_parked(new) == AGENTS, 5, "the long-polls at the new one")
            switched = time.time()
            wait_until(lambda: seen_by(new, switched) == {"node-0", "node-1"}, 10,
                       "heartbeats at the new coordinator")
            # Identity and journal kept; nothing ran again.
            assert [(a.state_dir / "identity.json").read_text() for a in agents] == identities
            assert [(a.state_dir / "journal.json").read_bytes() for a in agents] == journals
            assert item_events(new, "running") == started
            for agent in agents:
                assert (agent.state_dir / "coordinator.json").stat().st_mode & 0o777 == 0o600
                assert home(agent)["previous"]["urls"] == [old.url]
            text = logs(agents)
            for step in ("told", "ca-verified", "credential-known", "switched"):
                assert f"event=retarget step={step}" in text, text

            # A restart follows the persisted coordinator, not the config's.
            agents[0].stop()
            agents[0].start()
            restarted = time.time()
            wait_until(lambda: "node-0" in seen_by(new, restarted), 30,
                       lambda: "the restarted agent at the new coordinator\n" + logs(agents))
            assert "step=restored" in agents[0].log.read_text()

            # The pivot rolled back: the old coordinator names no target, the new one goes.
            old.admin.request("DELETE", "/v1/move-target")
            assert old.admin.get("/v1/move-target") is None
            new.stop()
        back = time.time()
        wait_until(lambda: all(home(a) is not None and home(a)["current"]["urls"] == [old.url]
                               for a in agents), 60,
                   lambda: "every agent back at the old coordinator\n" + logs(agents))
        wait_until(lambda: seen_by(old, back) == {"node-0", "node-1"}, 15,
                   "heartbeats at the old coordinator again")
        assert "event=retarget step=back" in logs(agents)
        assert [(a.state_dir / "identity.json").read_text() for a in agents] == identities


def test_agents_stay_when_the_targets_ca_is_not_the_pinned_one(tmp_path: Path) -> None:
    with running_coordinator(tmp_path / "old", CLUSTER) as old, \
            fleet(old, tmp_path) as agents:
        copy_data(old, tmp_path / "new")
        with running_coordinator(tmp_path / "new", None) as new:
            old.admin.request("PUT", "/v1/move-target",
                              body={"url": new.url, "caPin": "sha256:" + "0" * 64})
            wait_until(lambda: logs(agents).count("step=refused") >= 2 * AGENTS, 60,
                       lambda: "the agents refusing the target twice each\n" + logs(agents))
            assert all(home(a) is None for a in agents)
            assert "refusing to trust it. Either the move target is wrong (it is the " \
                "pivot's --to-ca: `coordinator pivot --abort`" in logs(agents)
            assert pin(new) in logs(agents)  # it says which CA it was shown
            since = time.time()
            wait_until(lambda: seen_by(old, since) == {"node-0", "node-1"}, 10,
                       "heartbeats at the old coordinator")


def test_agents_wait_for_a_target_that_does_not_know_them_yet_then_move(
        tmp_path: Path) -> None:
    with running_coordinator(tmp_path / "old", CLUSTER) as old, \
            fleet(old, tmp_path) as agents:
        copy_data(old, tmp_path / "new", whole=False)  # same CA, no machines yet
        with running_coordinator(tmp_path / "new", None) as new:
            old.admin.request("PUT", "/v1/move-target", body={"url": new.url, "caPin": pin(new)})
            wait_until(lambda: logs(agents).count("step=unknown") >= 2 * AGENTS, 60,
                       lambda: "the agents finding the target does not know them\n"
                       + logs(agents))
            assert all(home(a) is None for a in agents)
            since = time.time()
            wait_until(lambda: seen_by(old, since) == {"node-0", "node-1"}, 10,
                       "heartbeats at the old coordinator meanwhile")
            # The state arrives (a restore on the same port): the agents move at their next check.
            new.stop()
            copy_data(old, tmp_path / "new")
            new.start()
            wait_until(lambda: all(following(a, new) for a in agents), 60,
                       lambda: "every agent following the new coordinator\n" + logs(agents))


def test_agents_never_send_their_credential_to_a_plain_http_replica_of_a_target(
        tmp_path: Path) -> None:
    """A target whose first URL is the real, pinned new coordinator and whose other replica
    is plain HTTP (an older coordinator took it): an agent that moved would, once the first
    stops answering, send its credential in clear text to whoever listens at the second. The
    agent refuses the whole target, naming the URL, and stays with the coordinator it has;
    nor does a self-signed impostor named with the real target's pin get a credential."""
    with running_coordinator(tmp_path / "old", CLUSTER) as old, fleet(old, tmp_path) as agents, \
            rogue_server(None) as rogue:
        copy_data(old, tmp_path / "new")  # a target that knows every credential
        with running_coordinator(tmp_path / "new", None) as new:
            store_move_target(old, {"urls": [new.url, rogue.url], "ca_pin": pin(new),
                                    "since": time.time()})
            for index in range(AGENTS):  # a new assignment, which carries the target
                old.cli("machines", "label", f"node-{index}", "zone=eu-1b")
            wait_until(lambda: logs(agents).count("step=refused") >= AGENTS
                       or any(following(a, new) for a in agents), 30,
                       lambda: "the agents refusing the target\n" + logs(agents))
        since = time.time()  # the new one stopped: a moved agent would try the rogue next
        wait_until(lambda: rogue.requests or seen_by(old, since) == {"node-0", "node-1"}, 15,
                   lambda: "heartbeats at the old coordinator\n" + logs(agents))
        time.sleep(1.0)  # a few more heartbeats' time for any to go astray
        assert rogue.authorizations == [] and rogue.requests == []
        assert all(home(a) is None for a in agents)
        assert f"the move target {rogue.url} is not https" in logs(agents)

        # A self-signed impostor named with the real target's pin: asked for its CA, which
        # is not the pinned one, and for nothing else.
        with rogue_server(tmp_path / "impostor") as impostor:
            old.admin.request("PUT", "/v1/move-target", body={"url": impostor.url,
                                                              "caPin": pin(new)})
            wait_until(lambda: logs(agents).count(f"{impostor.url} presented CA") >= AGENTS,
                       30, lambda: "the agents refusing the impostor\n" + logs(agents))
        assert impostor.authorizations == []
        assert {path for _, path, _ in impostor.requests} == {"/v1/ca.crt"}
        assert all(home(a) is None for a in agents)
