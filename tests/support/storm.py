"""A kill storm over a fleet of tests/support/rollout.py: agents and the coordinator killed -9
at random while a rollout and an upgrade run, and what must hold afterwards, read from the
event history and from the files the nodes' items wrote.

The storm's items are not idempotent: every run appends `START key nonce time` to
var/log/storm.log (relative to the node's root) before it works and `END key nonce time`
after, the nonce drawn anew by each run. A run that was killed or cancelled leaves a START
without its END; a run that completed twice leaves two ENDs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.rollout import Fleet

STORM_LOG = "var/log/storm.log"
JOURNAL = "var/lib/nodeagent/journal.json"  # the fleet's agents keep their state there
# How long after a command's exit its agent may take to record it in its journal on a loaded
# machine (a few fsyncs): only a kill within it, that found the journal still without the
# run, may run the item again.
JOURNAL_WINDOW = 1.0

# How long the storm waits for a restarted agent to be back (to have fetched its assignment)
# before it kills the next: one agent down at a time, whatever a restart costs (ten seconds on
# a loaded machine, where a fixed pace had half the fleet restarting at once), yet a
# coordinator that is down holds the agents' kills back no longer than this.
AGENT_BACK = 15.0

# One run of an item: `sh -c SCRIPT sh KEY SECONDS`, KEY naming the item and its version.
RUN = ('n=$(od -An -N6 -tx1 /dev/urandom | tr -d " \\n"); mkdir -p var/log; '
       'echo "START $1 $n $(date +%s.%N)" >> var/log/storm.log; sleep $2; '
       'echo "END $1 $n $(date +%s.%N)" >> var/log/storm.log')

# The state changes the lifecycle allows (no machine is deleted in a storm).
EDGES = {("Pending", "Prepare"), ("Prepare", "Deploy"), ("Deploy", "Ready"),
         ("Ready", "Upgrade"), ("Upgrade", "Ready"), ("Ready", "Reconfigure"),
         ("Reconfigure", "Ready")}


def storm_item(name: str, phase: str, version: str, key: str, seconds: float) -> str:
    """A spec item (YAML, indented for a role's list) that runs RUN for key."""
    return (f"    - name: {name}\n      phase: {phase}\n      version: \"{version}\"\n"
            f"      timeout: 60\n      action:\n        type: exec\n"
            f"        argv: [sh, -c, '{RUN}', sh, \"{key}\", \"{seconds}\"]\n")


@dataclass(frozen=True)
class Kill:
    """One kill -9 of a node: when it began and when everything was dead, and whether the
    journal then still had an item in progress (a command that exited, its run not yet
    recorded, is the one window docs/agent.md names)."""

    began: float
    ended: float
    unjournaled: bool


@dataclass(frozen=True)
class Line:
    mark: str  # START | END
    key: str
    nonce: str
    at: float


def runs(root: Path) -> list[Line]:
    """The lines a node's storm items wrote, in order."""
    path = root / STORM_LOG
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        mark, key, nonce, at = text.split()
        lines.append(Line(mark, key, nonce, float(at)))
    return lines


def completions(lines: Sequence[Line], kills: Sequence[Kill] = ()) -> dict[str, int]:
    """How many runs of each key completed. A run that its rerun follows at once, with the
    node killed within JOURNAL_WINDOW of its END and the journal found without the run after
    the kill, is not counted: the kill fell between the command's exit and the journal's
    record of it (the one window docs/agent.md names), and the rerun is the run that counts.
    Any other repeat is counted."""
    counted: dict[str, int] = {}
    for index, line in enumerate(lines):
        if line.mark != "END":
            continue
        after = lines[index + 1] if index + 1 < len(lines) else None
        if after is not None and (after.mark, after.key) == ("START", line.key) and \
                any(kill.unjournaled and kill.began <= line.at + JOURNAL_WINDOW
                    and line.at <= kill.ended for kill in kills):
            continue
        counted[line.key] = counted.get(line.key, 0) + 1
    return counted


def unjournaled(root: Path) -> bool:
    """Whether the node's journal has an item started and not recorded as applied."""
    path = root / JOURNAL
    return path.exists() and json.loads(path.read_text())["in_progress"] is not None


def assert_runs_sequential(hostname: str, lines: Sequence[Line]) -> None:
    """A node runs one item at a time, so each END follows its own START (same key and
    nonce) with no other line between: one run completing another's work, or two runs at
    once on a node, would break it."""
    for before, line in zip([None, *lines], lines, strict=False):
        if line.mark == "END":
            assert before is not None and before.mark == "START" and \
                (before.key, before.nonce) == (line.key, line.nonce), \
                f"{hostname}: {line} does not follow its own START (before it: {before})"


def intervals(lines: Sequence[Line], key_prefix: str, kills: Sequence[Kill],
              until: float) -> list[tuple[float, float]]:
    """When runs of keys starting with key_prefix were running on one node: from START to
    END; a run without END ended no later than the node's next line or the node's next
    kill (or `until`)."""
    found = []
    for index, line in enumerate(lines):
        if line.mark != "START" or not line.key.startswith(key_prefix):
            continue
        after = lines[index + 1] if index + 1 < len(lines) else None
        if after is not None and after.mark == "END" and after.nonce == line.nonce:
            found.append((line.at, after.at))
            continue
        ends = [k.ended for k in kills if k.ended >= line.at] + ([after.at] if after else []) \
            + [until]
        found.append((line.at, min(ends)))
    return found


def assert_one_at_a_time(what: str, by_host: dict[str, list[tuple[float, float]]]) -> None:
    """No two hosts ran `what` at the same moment."""
    spans = sorted((start, end, host) for host, found in by_host.items() for start, end in found)
    for (_, end, host), (start, _, other) in itertools.pairwise(spans):
        assert host == other or start >= end, \
            f"{what} ran on {host} and {other} at once (from {start:.3f} to {end:.3f})"


def replay(events: Sequence[dict[str, Any]], managers: Sequence[str],
           batch: int) -> dict[str, list[str]]:
    """Replay the history's state changes in order, checking after each one the ordering
    invariants: the first manager deploys alone; then at most one manager at a time in
    Deploy, Upgrade or Reconfigure; workers in Deploy only once a manager is deployed, and
    at most `batch` workers in each of Deploy, Upgrade and Reconfigure; no worker upgrades
    beside a manager. Returns each machine's states in order."""
    state: dict[str, str] = {}
    seen: dict[str, list[str]] = {}
    manager_deployed = False
    for event in events:
        if event["kind"] != "state":
            continue
        host, came, went = event["hostname"], event["data"]["from"], event["data"]["to"]
        assert state.get(host, came) == came, f"{host}: {came} -> {went} but it was {state[host]}"
        assert (came, went) in EDGES, f"{host}: {came} -> {went} is no lifecycle step"
        seen.setdefault(host, [came]).append(went)
        state[host] = went
        manager_deployed |= host in managers and (came, went) == ("Deploy", "Ready")

        def hosts(states: set[str], of_managers: bool) -> set[str]:
            return {h for h, s in state.items() if s in states and (h in managers) == of_managers}

        busy = hosts({"Deploy", "Upgrade", "Reconfigure"}, True)
        assert len(busy) <= 1, f"managers {sorted(busy)} busy at once ({event['message']})"
        if not manager_deployed:
            deploying = hosts({"Deploy"}, True) | hosts({"Deploy"}, False)
            assert len(deploying) <= 1, f"the first manager did not deploy alone: {deploying}"
        for phase in ("Deploy", "Upgrade", "Reconfigure"):
            workers = hosts({phase}, False)
            assert len(workers) <= batch, f"{len(workers)} workers in {phase}: {sorted(workers)}"
        assert not (hosts({"Upgrade"}, False) and hosts({"Upgrade"}, True)), \
            f"workers upgrading beside a manager ({event['message']})"
    return seen


@dataclass
class Storm:
    """Kills agents (each restarted after a moment) from one thread and the coordinator
    (restarted at once) from another, until stopped. The coordinator lock is held while it is
    down: `admin` calls of the test wait for it to be back.

    Each waits on what the last kill was for before the next, rather than keeping a fixed
    pace: a restart costs seconds (ten on a loaded machine), and a kill before the restarted
    one moved the fleet on would only stretch the outage without testing anything more. So an
    agent is killed about agent_every seconds after the last one killed is back (AGENT_BACK),
    and the coordinator again once the restarted one has been up about coordinator_every
    seconds, and at least as long as its restart took (up half the time however slow the
    machine), and has recorded a state change."""

    fleet: Fleet
    join: str
    rand: random.Random
    agent_every: float = 0.7
    coordinator_every: float = 2.0
    agent_kills: dict[str, list[Kill]] = field(default_factory=dict)
    coordinator_kills: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _restarted_at: int = 0  # the coordinator log's size when it was last started
    _failed: list[BaseException] = field(default_factory=list)  # what ended a storm thread

    def admin_json(self, *args: str) -> Any:
        with self.lock:
            return self.fleet.admin_json(*args)

    def admin(self, *args: str) -> str:
        with self.lock:
            return self.fleet.admin(*args)

    @contextlib.contextmanager
    def running(self) -> Iterator[Storm]:
        """The storm while inside; what failed in it (a coordinator that did not come back)
        is raised on leaving, rather than lost with its thread."""
        threads = [threading.Thread(target=self._guarded, args=(target,), name=name, daemon=True)
                   for target, name in ((self._kill_agents, "storm-agents"),
                                        (self._kill_coordinator, "storm-coordinator"))]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(timeout=60)
            if self._failed:
                raise self._failed[0]

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as error:  # raised again in the test's thread
            self._failed.append(error)
            self._stop.set()

    def stop(self) -> None:
        self._stop.set()

    def kills(self) -> int:
        return sum(len(k) for k in self.agent_kills.values())

    def _kill_agents(self) -> None:
        while not self._stop.wait(self.rand.uniform(0.5, 1.5) * self.agent_every):
            self._kill_agent()

    def _kill_agent(self) -> None:
        """kill -9 a node's agent and everything it runs, mostly one in the middle of an
        item (the case the journal exists for), and start it again after a moment. In the
        middle of an item means of a run its agent started since its last kill: the run a
        kill cut shows as running until the agent is back and runs it again (seconds, on a
        loaded machine), and killing a starting agent again and again holds the fleet back
        without cutting any item."""
        hostnames = self.fleet.hostnames
        busy = [h for h in hostnames if (lines := runs(self.fleet.root(h)))
                and lines[-1].mark == "START"
                and lines[-1].at > max((k.ended for k in self.agent_kills.get(h, [])),
                                       default=0.0)]
        hostname = self.rand.choice(busy if busy and self.rand.random() < 0.6 else hostnames)
        began = time.time()
        self.fleet.kill_node(hostname)
        self.agent_kills.setdefault(hostname, []).append(
            Kill(began, time.time(), unjournaled(self.fleet.root(hostname))))
        time.sleep(self.rand.uniform(0.1, 1.0))
        log = self.fleet.tmp / f"{hostname}.log"
        started = log.stat().st_size
        self.fleet.start_agent(hostname, self.join)
        self._wait_for(log, started, b' msg="assignment ', AGENT_BACK)

    def _wait_for(self, log: Path, offset: int, mark: bytes, longest: float) -> bool:
        """Wait until log shows mark past offset; False if the storm stopped first or
        longest seconds went by."""
        deadline = time.monotonic() + longest
        while True:
            with log.open("rb") as out:
                out.seek(offset)
                if mark in out.read():
                    return True
            if self._stop.wait(0.1) or time.monotonic() > deadline:
                return False

    def _kill_coordinator(self) -> None:
        coordinator = self.fleet.replicas[0]
        restart = 0.0  # how long the last restart took
        while not self._stop.wait(max(self.rand.uniform(0.5, 1.5) * self.coordinator_every,
                                      restart)):
            if not self._wait_for(coordinator.log, self._restarted_at, b" event=state ",
                                  float("inf")):
                return
            with self.lock:
                began = time.monotonic()
                coordinator.stop(crash=True)
                self.coordinator_kills += 1
                self._restarted_at = coordinator.log.stat().st_size
                coordinator.start()
                restart = time.monotonic() - began
