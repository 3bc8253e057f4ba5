"""`coordinator pivot` between two real `coordinator serve` processes (HTTPS, each its own CA
and secrets key), with real `nodeagent run` agents: the state moves to the new coordinator,
the agents follow through their assignment with their identities and journals (no item run
again), the old one becomes a read-only copy naming the new URL and refreshed from it; a pivot
interrupted by a kill -9 of either coordinator at any step completes when run again."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.client import ClientError
from tests.support.agent import joined_fleet
from tests.support.builders import registration
from tests.support.driver import Call, Steps
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.pivoting import STEPS, interrupted, pivot_argv
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AGENTS = 3
REFRESH_SECONDS = 2.0


def cluster(runs: Path, release: str = "1") -> str:
    """Managers only, auto-approved; every item appends its name to runs/HOSTNAME, so an item
    run twice shows."""
    def item(name: str, phase: str) -> str:
        return (f"    - {{name: {name}, phase: {phase}, action: {{type: exec, argv: "
                f"[sh, -c, 'echo {name} >> {runs}/$(hostname)']}}}}\n")
    return (f"name: lab\nrelease: \"{release}\"\nsettings: {{autoApprove: true, "
            "autoApproveRole: manager, drain: {enabled: false}}\nmachineTypes:\n  manager:\n"
            + item("base", "prepare") + item("control-plane", "deploy")
            + item(f"upgrade-{release}", "upgrade"))


def states(served: ServedCoordinator) -> dict[str, str]:
    return {m["hostname"]: m["state"] for m in served.admin.all_machines()}


def machines_seen(served: ServedCoordinator) -> list[tuple[str, str, str, float]]:
    """Each machine's hostname, state, note and last heartbeat: what a timed-out wait shows."""
    return [(m["hostname"], m["state"], m.get("note") or "", m["last_seen"])
            for m in served.admin.all_machines()]


def log_tails(logs: list[Path], lines: int = 30) -> str:
    """The last lines of each log: what a timed-out wait shows of the processes behind it."""
    return "\n".join(f"--- {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                     for log in logs if log.exists())


def runs(directory: Path) -> dict[str, list[str]]:
    return {path.name: path.read_text().split() for path in sorted(directory.iterdir())}


def pivot(old: ServedCoordinator, new: ServedCoordinator, *args: str, ok: bool = True,
          pinned: bool = False) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(pivot_argv(old, new, None, *args, pinned=pinned),
                            capture_output=True, text=True, timeout=120, check=False)
    if ok:
        assert result.returncode == 0, (result.stdout, result.stderr)
    return result


Pair = tuple[ServedCoordinator, ServedCoordinator, Path]


@contextlib.contextmanager
def serving_pair(tmp: Path) -> Iterator[Pair]:
    """The old coordinator with the cluster, the new one empty, and the directory where the
    items record their runs."""
    done = tmp / "runs"
    done.mkdir()
    refresh = ("--pivot-refresh", str(REFRESH_SECONDS))
    with running_coordinator(tmp / "old", cluster(done), serve_args=refresh) as old, \
            running_coordinator(tmp / "new", None, serve_args=refresh) as new:
        yield old, new, done


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """A pair of its own, for a test that pivots (or imports) for real."""
    with serving_pair(tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def shared_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """One pair for the tests that begin a pivot and roll it back, or are refused: a pair's
    start is most of their CPU."""
    with serving_pair(tmp_path_factory.mktemp("shared")) as served:
        yield served


@pytest.fixture
def idle_pair(shared_pair: Pair) -> Iterator[Pair]:
    """The shared pair with no pivot under way; one a failed test left is rolled back after
    it, so that the next test does not fail for it."""
    old = shared_pair[0]
    assert old.admin.get("/v1/pivot")["pivot"] is None
    yield shared_pair
    if old.admin.get("/v1/pivot")["pivot"] is not None:
        old.cli("pivot", "--abort", ok=False)


def begin(old: ServedCoordinator, new: ServedCoordinator) -> str:
    answer = old.admin.request("POST", "/v1/pivot", {
        "to": new.url, "caPem": new.ca_file.read_text(),
        "token": new.token_file.read_text().strip()})
    return str(answer["pivot"]["id"])


def registering(hostname: str, token: str, expect: int) -> Steps[dict[str, Any]]:
    answer: dict[str, Any] = yield Call("POST", "/v1/agent/register", expect, join_token=token,
                                        body=registration(hostname, token))
    return answer


def test_a_frozen_coordinator_refuses_changes_naming_the_pivot_until_it_is_aborted(
        idle_pair: Pair) -> None:
    old, new, _ = idle_pair
    pivot_id = begin(old, new)
    old.admin.request("POST", f"/v1/pivot/{pivot_id}/steps/frozen")
    refused = old.cli("join-token", "create", "lab", ok=False)
    assert refused.returncode == 1 and pivot_id in refused.stderr and "--abort" in refused.stderr
    assert "frozen" in old.cli("pivot", "status").stdout
    aborted = old.cli("pivot", "--abort")
    assert f"pivot {pivot_id} to {new.url} rolled back from frozen" in aborted.stdout
    old.cli("join-token", "create", "lab")
    assert "no pivot" in old.cli("pivot", "status").stdout
    assert "nothing to abort" in old.cli("pivot", "--abort", ok=False).stderr


def test_the_target_imports_a_pivot_once_and_the_old_one_is_then_a_read_only_copy(
        pair: Pair, tmp_path: Path) -> None:
    old, new, _ = pair
    with joined_fleet(old, tmp_path, AGENTS, "heartbeatSeconds: 1"):
        wait_until(lambda: set(states(old).values()) == {"Ready"} and len(states(old)) == AGENTS,
                   120, "a Ready cluster", interval=0.5)
        pivot_id = begin(old, new)
        old.admin.request("POST", f"/v1/pivot/{pivot_id}/steps/frozen")
        archive = old.admin.download("POST", f"/v1/pivot/{pivot_id}/snapshot",
                                     "application/gzip", lambda received: None)
        path = f"/v1/pivot/import?pivot={pivot_id}&from={old.url}"
        for imported in (True, False):  # the same pivot again: nothing more to do
            answer = new.admin.request("POST", path, text=archive,
                                       content_type="application/gzip")
            assert answer["imported"] is imported
        other = new.client(new.token_file.read_text().strip())
        with pytest.raises(ClientError, match="already holds the state of pivot") as refused:
            other.request("POST", f"/v1/pivot/import?pivot=pv-other&from={old.url}",
                          text=archive, content_type="application/gzip")
        assert refused.value.status == 409
        copied = {m["id"]: m for m in new.admin.all_machines()}
        assert copied.keys() == {m["id"] for m in old.admin.all_machines()}
        assert new.admin.get("/v1/clusters/lab")["release"] == "1"
        assert new.admin.get("/v1/events?kind=pivot-imported")[0]["data"]["pivot"] == pivot_id

        for step in ("copied", "announced", "done"):  # as the command records them
            old.admin.request("POST", f"/v1/pivot/{pivot_id}/steps/{step}")
        read_only_copy(old, new)
        joined = new.register("late-0")  # a machine that joined the new one after the pivot
        wait_until(lambda: len(old.admin.all_machines([("cluster", "lab")]))
                   == len(new.admin.all_machines([("cluster", "lab")])), 6 * REFRESH_SECONDS + 30,
                   "the machine that joined the new coordinator in the old one's copy")
        copied = old.admin.get("/v1/machines/late-0")
        assert copied["id"] == joined["machine_id"]
        # Its credential is the new one's to check, not revoked: the copy must not say so.
        assert not copied["credential"]["revoked"] and "revoked" not in copied["note"]["text"]


def settled(old: ServedCoordinator, new: ServedCoordinator, done: Path) -> None:
    """Every agent on the new coordinator with the identity it had on the old one, heard
    from there since the pivot; every item run once; the old one a read-only copy naming the
    new URL, refreshed from it; an upgrade applied to the new one reaching every agent."""
    ids = {m["hostname"]: m["id"] for m in old.admin.all_machines()}
    since = time.time()  # not earlier: the copy carries the old one's last_seen of each machine
    wait_until(lambda: all(m["last_seen"] >= since for m in new.admin.all_machines()),
               60, lambda: f"every agent heard from by the new coordinator (machines "
                           f"{machines_seen(new)}, at {time.time():.1f})\n"
                           + log_tails(sorted(done.parent.glob("agent-*/agent.log"))),
               interval=0.5)
    assert {m["hostname"]: m["id"] for m in new.admin.all_machines()} == ids
    assert runs(done) == {host: ["base", "control-plane"] for host in ids}

    read_only_copy(old, new)

    new.admin.request("PUT", "/v1/clusters", text=cluster(done, "2"),
                      content_type="application/yaml")
    wait_until(lambda: all("upgrade-2" in lines for lines in runs(done).values())
               and set(states(new).values()) == {"Ready"}, 120,
               lambda: f"the upgrade driven from the new coordinator (runs {runs(done)}, "
                       f"machines {machines_seen(new)}, at {time.time():.1f})\n"
                       + log_tails([new.log, *sorted(done.parent.glob("agent-*/agent.log"))]),
               interval=0.5)
    assert runs(done) == {host: ["base", "control-plane", "upgrade-2"] for host in ids}


def read_only_copy(old: ServedCoordinator, new: ServedCoordinator) -> None:
    """The old coordinator refuses changes naming the new URL, and its copy follows the new
    one's changes."""
    refused = old.cli("join-token", "create", "lab", ok=False)
    assert refused.returncode == 1 and f"moved to {new.url}" in refused.stderr
    new.cli("machines", "label", "node-0", "zone=eu-1b")
    wait_until(lambda: old.admin.get("/v1/machines/node-0")["labels"].get("zone") == "eu-1b",
               6 * REFRESH_SECONDS + 30, "the old coordinator's copy refreshed")
    status = old.cli("status", "lab").stdout
    assert f"moved to {new.url} at " in status and "read-only copy refreshed at " in status


def ready(served: ServedCoordinator) -> bool:
    found = states(served)
    return len(found) == AGENTS and set(found.values()) == {"Ready"}


def test_a_pivot_moves_the_state_and_the_agents_and_leaves_a_read_only_copy(
        pair: Pair, tmp_path: Path) -> None:
    old, new, done = pair
    token = old.join_token()
    with joined_fleet(old, tmp_path, AGENTS, "heartbeatSeconds: 1"):
        wait_until(lambda: ready(old), 120, "a Ready cluster", interval=0.5)
        result = pivot(old, new, pinned=True)
        for number, step in enumerate(STEPS, 1):
            assert f"[{number}/4] {step}: " in result.stdout
        assert f"agents moved {AGENTS}/{AGENTS}" in result.stdout
        again = pivot(old, new)  # done already: nothing more to do, and said so
        assert "done:" in again.stdout and "[1/4]" not in again.stdout
        settled(old, new, done)
    refused = old.run(registering("late", token, 409))["error"]  # it would be left behind
    assert f"this coordinator has moved to {new.url}" in refused and "join string" in refused


@pytest.mark.parametrize("victims", [("old", "new"), ("new", "old")], ids=["old-first",
                                                                            "new-first"])
def test_a_pivot_killed_at_every_step_completes_when_run_again(
        pair: Pair, tmp_path: Path,
        victims: tuple[str, str]) -> None:
    old, new, done = pair
    by_name = {"old": old, "new": new}
    with joined_fleet(old, tmp_path, AGENTS, "heartbeatSeconds: 1"):
        wait_until(lambda: ready(old), 120, "a Ready cluster", interval=0.5)
        for index, step in enumerate(STEPS):
            interrupted(pivot_argv(old, new), step, by_name[victims[index % 2]])
            assert old.admin.get("/v1/pivot")["pivot"] is not None  # never lost, never undone
        result = pivot(old, new)
        assert "done: " in result.stdout
        settled(old, new, done)


def test_an_abort_after_agents_moved_brings_them_back_and_unfreezes_the_old_one(
        pair: Pair, tmp_path: Path) -> None:
    old, new, done = pair
    with joined_fleet(old, tmp_path, AGENTS, "heartbeatSeconds: 1") as agents:
        wait_until(lambda: ready(old), 120, "a Ready cluster", interval=0.5)
        agents[-1].stop()  # its host down: the pivot cannot finish until it is back
        since = time.time()
        waited = pivot(old, new, "--wait", "5", ok=False)
        assert f"agents moved {AGENTS - 1}/{AGENTS}" in waited.stdout, waited.stdout
        assert "1 agent(s) have not reached" in waited.stderr and "--wait 0" in waited.stderr
        moved = wait_until(lambda: [m["hostname"] for m in new.admin.all_machines()
                                    if m["last_seen"] >= since], 30, "agents on the new one")
        assert len(moved) == AGENTS - 1

        aborted = pivot(old, new, "--abort")
        assert "rolled back from announced" in aborted.stdout, aborted.stdout
        back = time.time()
        wait_until(lambda: all(m["last_seen"] >= back for m in old.admin.all_machines()
                               if m["hostname"] in moved), 60, "the agents back on the old one",
                   interval=0.5)
        old.cli("join-token", "create", "lab")  # it takes changes again
        assert runs(done) == {f"node-{i}": ["base", "control-plane"] for i in range(AGENTS)}


def test_bad_pivot_requests_are_refused_naming_the_field(
        idle_pair: Pair) -> None:
    old, new, _ = idle_pair
    cases = [
        ("POST", "/v1/pivot", {"to": "ftp://new", "token": "x" * 20}, "to"),
        ("POST", "/v1/pivot", {"to": new.url, "token": "short"}, "token"),
        ("POST", "/v1/pivot/pv-1/steps/sideways", None, "step"),
    ]
    for method, path, body, field in cases:
        with pytest.raises(ClientError) as refused:
            old.admin.request(method, path, body)
        assert refused.value.status == 422 and field in str(refused.value), refused.value
    with pytest.raises(ClientError, match="pivot") as missing:
        new.admin.request("POST", "/v1/pivot/import", text=b"", content_type="application/gzip")
    assert missing.value.status == 422
    with pytest.raises(ClientError, match=r"damaged|not a coordinator backup") as damaged:
        new.admin.request("POST", "/v1/pivot/import?pivot=pv-1&from=https://old",
                          text=b"not an archive", content_type="application/gzip")
    assert damaged.value.status == 422
    with pytest.raises(ClientError, match="no pivot pv-1 here") as unknown:
        old.admin.request("POST", "/v1/pivot/pv-1/steps/frozen")
    assert unknown.value.status == 409
    assert old.admin.get("/v1/pivot")["pivot"] is None and new.admin.all_machines() == []


def test_a_target_that_holds_state_is_refused_before_anything_is_frozen(
        idle_pair: Pair, tmp_path: Path) -> None:
    """Pivoting to a coordinator that holds a state (pivoting back to the old one, say), or
    that cannot be reached, is refused before the old one is frozen, with the way out."""
    old = idle_pair[0]
    with running_coordinator(tmp_path / "new", cluster(tmp_path / "runs")) as new:
        refused = pivot(old, new, ok=False)
        assert refused.returncode == 1 and "frozen" not in refused.stdout, refused
        assert f"{new.url} cannot take the state of {old.url}" in refused.stderr, refused
        assert "the target already holds a coordinator's state (rows in " in refused.stderr
        assert "`coordinator init --data-dir NEW_DIR --name HOST`" in refused.stderr
        assert "Nothing was frozen" in refused.stderr
        assert old.admin.get("/v1/pivot")["pivot"] is None
        old.cli("join-token", "create", "lab")  # it takes changes as before
        (tmp_path / "wrong.token").write_text("x" * 40)  # a token the target does not know
        argv = [*pivot_argv(old, new, None), "--to-token-file", str(tmp_path / "wrong.token")]
        wrong = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert "it refuses the token of --to-token-file" in wrong.stderr, wrong
        assert "Nothing was frozen" in wrong.stderr
        new.stop()  # a target that cannot be reached: refused alike, nothing frozen
        unreachable = pivot(old, new, ok=False)
        assert f"cannot reach the coordinator at {new.url}" in unreachable.stderr, unreachable
        assert "Nothing was frozen" in unreachable.stderr
        assert old.admin.get("/v1/pivot")["pivot"] is None


def test_a_pivoting_coordinator_registers_no_machine_until_rolled_back(
        idle_pair: Pair, tmp_path: Path) -> None:
    """A machine registered with the old coordinator once its state is being copied would be
    missing from the new one, its agent left behind: it is refused, naming the pivot."""
    old, new, _ = idle_pair
    token = old.join_token()
    pivot_id = begin(old, new)
    old.admin.request("POST", f"/v1/pivot/{pivot_id}/steps/frozen")
    refused = old.run(registering("late", token, 409))["error"]
    assert f"pivot {pivot_id} to {new.url} is under way" in refused and "rolled back" in refused
    old.cli("pivot", "--abort")
    old.run(registering("late", token, 201))  # rolled back: it registers again


def test_an_abort_from_a_plain_http_coordinator_sends_no_agent_back_over_plain_http(
        tmp_path: Path) -> None:
    """An old coordinator serving plain HTTP (--insecure-http, a demo) is never named as a move
    target: the abort says how the agents that moved come back instead."""
    (tmp_path / "old").mkdir()  # plain HTTP: no `coordinator init` makes it
    with running_coordinator(tmp_path / "old", cluster(tmp_path / "runs"), tls=False) as old, \
            running_coordinator(tmp_path / "new", None) as new:
        pivot_id = begin(old, new)
        for step in ("frozen", "copied", "announced"):
            old.admin.request("POST", f"/v1/pivot/{pivot_id}/steps/{step}")
        aborted = pivot(old, new, "--abort")
        assert "this one serves plain HTTP, where no agent is sent" in aborted.stdout, aborted
        assert f"stop {new.url} and they come back" in aborted.stdout
        assert new.admin.get("/v1/move-target") is None
        assert old.admin.get("/v1/pivot")["pivot"] is None  # rolled back all the same
