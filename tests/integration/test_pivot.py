"""`coordinator pivot` between two real `coordinator serve` processes (HTTPS, each its own CA
and secrets key), with real `nodeagent run` agents: the state moves to the new coordinator,
the agents follow through their assignment with their identities and journals (no item run
again), the old one becomes a read-only copy naming the new URL and refreshed from it; a pivot
interrupted by a kill -9 of either coordinator at any step completes when run again."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli.client import ClientError
from tests.support.agent import joined_fleet
from tests.support.harness import ServedCoordinator, running_coordinator
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
            "autoApproveRole: manager}\nmachineTypes:\n  manager:\n"
            + item("base", "prepare") + item("control-plane", "deploy")
            + item(f"upgrade-{release}", "upgrade"))


def states(served: ServedCoordinator) -> dict[str, str]:
    return {m["hostname"]: m["state"] for m in served.admin.get("/v1/machines")}


def runs(directory: Path) -> dict[str, list[str]]:
    return {path.name: path.read_text().split() for path in sorted(directory.iterdir())}


def pivot(old: ServedCoordinator, new: ServedCoordinator, *args: str,
          ok: bool = True) -> subprocess.CompletedProcess[str]:
    return old.cli("pivot", "--to", new.url, "--to-token-file", str(new.token_file),
                   "--to-ca", str(new.ca_file), *args, ok=ok, timeout=120)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServedCoordinator, ServedCoordinator, Path]]:
    done = tmp_path / "runs"
    done.mkdir()
    refresh = ("--pivot-refresh", str(REFRESH_SECONDS))
    with running_coordinator(tmp_path / "old", cluster(done), serve_args=refresh) as old, \
            running_coordinator(tmp_path / "new", None, serve_args=refresh) as new:
        yield old, new, done


def begin(old: ServedCoordinator, new: ServedCoordinator) -> str:
    answer = old.admin.request("POST", "/v1/pivot", {
        "to": new.url, "caPem": new.ca_file.read_text(),
        "token": new.token_file.read_text().strip()})
    return str(answer["pivot"]["id"])


def test_a_frozen_coordinator_refuses_changes_naming_the_pivot_until_it_is_aborted(
        pair: tuple[ServedCoordinator, ServedCoordinator, Path]) -> None:
    old, new, _ = pair
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


def test_the_target_imports_a_pivot_once_and_refuses_another_state(
        pair: tuple[ServedCoordinator, ServedCoordinator, Path], tmp_path: Path) -> None:
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
        copied = {m["id"]: m for m in new.admin.get("/v1/machines")}
        assert copied.keys() == {m["id"] for m in old.admin.get("/v1/machines")}
        assert new.admin.get("/v1/clusters/lab")["release"] == "1"
        assert new.admin.get("/v1/events?kind=pivot-imported")[0]["data"]["pivot"] == pivot_id
