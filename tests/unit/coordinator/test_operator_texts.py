"""Small pure pieces of the operator tools: --since, durations, log headers, the upgrade plan,
what machines would run, machine gauges, history wakes."""

from __future__ import annotations

import asyncio
from datetime import datetime

import click
import pytest

from coordinator.api.views import rendering_view
from coordinator.cli.events import parse_since
from coordinator.cli.formatting import duration, item_header, rendering_lines, upgrade_plan_lines
from coordinator.domain.model import MachineState
from coordinator.domain.records import MachineCount
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.fleet import Fleet
from coordinator.domain.views.rendering import (
    RenderedMachine,
    RenderedPhase,
    Rendering,
    Values,
    render_cluster,
    render_item,
)
from coordinator.metrics import Metrics
from coordinator.service.notifier import Notifier
from nodeagent.wire.protocol import StateItem
from tests.support.builders import MINTING_CLUSTER, cluster

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("text", "expected"), [
    ("90s", NOW - 90), ("10m", NOW - 600), ("2h", NOW - 7200), ("1.5d", NOW - 129600),
    ("1700000000", 1_700_000_000.0),
    ("2026-01-31T14:00:00+00:00", datetime.fromisoformat("2026-01-31T14:00:00+00:00").timestamp()),
])
def test_since_takes_durations_iso_times_and_unix_times(text: str, expected: float) -> None:
    assert parse_since(text, NOW) == expected


def test_since_names_the_option_and_the_forms_it_takes() -> None:
    with pytest.raises(click.BadParameter) as bad:
        parse_since("last tuesday", NOW)
    assert bad.value.param_hint == "--since" and "10m" in bad.value.message


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (0.4, "0s"), (59.9, "59s"),
                                                (65, "1m05s"), (7260, "2h01m")])
def test_durations_are_short(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("phase", "state", "label"), [
    ("deploy", "Deploy", "deploy/join"), ("deploy", "Upgrade", "deploy/join (in the upgrade)"),
    ("upgrade", "Upgrade", "upgrade/join")])
def test_a_log_header_says_when_an_upgrade_ran_a_changed_item(phase: str, state: str,
                                                              label: str) -> None:
    event = {"time": NOW, "hostname": "w1", "data": {
        "item": "join", "phase": phase, "state": state, "status": "succeeded", "attempt": 1,
        "exit_code": 0, "duration": 2.0}}
    assert item_header(event).split(" ", 3)[3] == f"{label} attempt 1 succeeded (exit 0, 2s)"


def test_the_upgrade_plan_puts_each_machine_on_a_line_with_the_items_it_runs() -> None:
    def worker(hostname: str) -> dict[str, object]:
        return {"hostname": hostname, "role": "worker", "from": "1.0", "items": [
            {"name": "join", "phase": "deploy", "version": "2"},
            {"name": "kubelet", "phase": "upgrade", "version": "1"}]}

    plan = {"cluster": "lab", "release": "2.0", "paused": False,
            "steps": [[worker("w1"), worker("w2")]],
            "waiting": [{**worker("w3"), "reason": "not responding"}],
            "nothing_to_run": [{"hostname": "m1", "role": "manager", "from": "1.0"}]}
    assert upgrade_plan_lines(plan) == [
        "upgrade of lab to release 2.0",
        "step 1: w1 (worker, from 1.0) runs deploy/join, upgrade/kubelet",
        "        w2 (worker, from 1.0) runs deploy/join, upgrade/kubelet",
        "not reached: w3 (worker, from 1.0): not responding; would run deploy/join, upgrade/kubelet",
        "nothing to run, recorded at 2.0: m1 (manager, from 1.0)"]


def test_what_a_machine_would_run_shows_every_field_and_each_text_as_the_node_gets_it() -> None:
    spec = cluster(manager=[StateItem.model_validate(raw) for raw in (
        {"name": "init", "phase": "deploy", "action": {"type": "exec", "argv": [
            "sh", "-c", "set -e\nkubeadm init --node-name ${machine.hostname}"],
            "cwd": "/root", "env": {"TOKEN": "${outputs.ca.token}"}}},
        {"name": "cni", "phase": "postdeploy", "version": "1.4", "versionCommand": ["cni", "-v"],
         "action": {"type": "download", "artifact": "cni.tgz", "sha256": "a" * 64,
                    "path": "/opt/cni.tgz"}})], name="lab", release="2.0")
    manager = render_cluster(spec, [], Fleet(1, 0)).machines[0]
    shown = Values({"machine.hostname": "manager-1", "outputs.ca.token": "t0ps3cret"},
                   secret=frozenset({"outputs.ca.token"})).shown()
    init = render_item(spec.items("manager", "deploy")[0], shown)
    unapproved = RenderedMachine("id-w1", "w1", None, None, MachineState.PENDING, "", {})
    rendering = Rendering(spec, None, [
        RenderedMachine(**{**vars(manager), "phases": (
            RenderedPhase("deploy", (init,)), *manager.phases[1:2])}), unapproved])
    lines = rendering_lines(rendering_view(rendering))
    assert lines == [
        "cluster lab, release 2.0, on its machines",
        "manager-1 (manager, Ready, 192.0.2.1)",
        "  deploy",
        "    init: exec",
        "      argv:",
        "        | sh -c 'set -e",
        "        | kubeadm init --node-name manager-1'",
        "      env TOKEN: [secret ${outputs.ca.token}]",
        "      cwd: /root",
        "  postdeploy",
        "    cni (version 1.4): download artifact cni.tgz to /opt/cni.tgz, mode 0644",
        f"      sha256: {'a' * 64}",
        "    cni.version (version 1.4+release.2.0): version",
        "      argv: cni -v",
        "      expects: 1.4",
        "w1 (no role, Pending, no address)",
        "  nothing until it is approved with a role"]
    assert "t0ps3cret" not in repr(rendering_view(rendering))


def test_a_job_phase_says_whom_it_runs_for_and_its_items_their_own_version() -> None:
    """The version a job's items carry (`1+mint.JOINER.SERIAL`) is the agent's business: the
    text names the joiner once, on the phase."""
    rendering = render_cluster(load_spec(MINTING_CLUSTER, "spec"), [], Fleet(1, 1))
    lines = rendering_lines(rendering_view(rendering))
    at = lines.index("  mint (for worker-1)")
    assert lines[at:at + 5] == [
        "  mint (for worker-1)", "    token: exec", "      argv: kubeadm token create --ttl 60s",
        "  revoke (for worker-1)", "    forget-token: exec"]


def test_machine_gauges_list_every_state_per_cluster_with_zeros() -> None:
    counts = [MachineCount("edge", "Ready", responding=True, count=1),
              MachineCount("edge", "Ready", responding=False, count=1),
              MachineCount("other", "Deploy", responding=True, count=1)]
    text = Metrics().exposition(counts).decode()
    assert 'nodeagent_machines{cluster="edge",state="Ready"} 2.0' in text
    assert 'nodeagent_machines{cluster="edge",state="Deploy"} 0.0' in text
    assert 'nodeagent_machines{cluster="other",state="Deploy"} 1.0' in text
    assert 'nodeagent_machines_not_responding{cluster="edge"} 1.0' in text
    assert 'nodeagent_machines_not_responding{cluster="other"} 0.0' in text


def test_connected_agents_count_machines_not_polls() -> None:
    metrics = Metrics()
    metrics.poll_opened("a")
    metrics.poll_opened("a")  # a retried poll overlapping the old one
    metrics.poll_opened("b")
    metrics.poll_closed("a")
    assert "nodeagent_agents_connected 2.0" in metrics.exposition([]).decode()
    metrics.poll_closed("a")
    metrics.poll_closed("b")
    assert "nodeagent_agents_connected 0.0" in metrics.exposition([]).decode()


async def test_history_watchers_wake_on_any_change_and_agents_only_on_their_own() -> None:
    notifier = Notifier()
    agent = notifier.subscribe("m1")
    watcher = notifier.changes()
    notifier.changed()
    assert watcher.is_set() and not agent.is_set()
    again = notifier.changes()
    assert not again.is_set()  # a new subscription waits for the next change
    notifier.wake(["m1"])
    await asyncio.sleep(0)
    assert agent.is_set() and again.is_set()
