"""The admin CLI as an operator runs it, against a real `coordinator serve` process: output
formats, machine logs, event filters, the live status view in a terminal, shell completion, a
spec refused naming its line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.builders import node_facts
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.seeding import pending_machine, seed
from tests.support.terminal import in_terminal, read_terminal

MISSPELT = Path(__file__).resolve().parents[2] / "data" / "bad-specs" / "unknown-placeholder.yaml"


@contextlib.contextmanager
def two_machines(tmp: Path) -> Iterator[ServedCoordinator]:
    """What every test here reads: w1 approved, one item succeeded and one failed; w2 Pending."""
    with running_coordinator(tmp) as served:
        w1 = served.register("w1")
        served.register("w2")
        served.cli("approve", "w1", "--role", "worker")
        served.wait_state("w1", "Prepare")
        served.report_item(w1, "base", "succeeded", output="base: configured\n")
        served.report_item(w1, "runtime", "failed", attempt=2, exit_code=100,
                           error="exit status 100", output="E: Unable to locate package containerd\n")
        yield served


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedCoordinator]:
    """One for the tests that only read, or are refused and check nothing changed: a
    coordinator's start (init, serve, the set-up) is most of such a test's CPU."""
    with two_machines(tmp_path_factory.mktemp("shared")) as served:
        yield served


@pytest.fixture
def own_coordinator(tmp_path: Path) -> Iterator[ServedCoordinator]:
    """One of its own, for a test that changes what the others read (a report, an approval, a
    new machine)."""
    with two_machines(tmp_path) as served:
        yield served


@pytest.mark.parametrize("command", [
    ("cluster", "get"), ("cluster", "get", "lab"), ("machines",), ("machines", "--cluster", "lab"),
    ("machines", "get", "w1"), ("status", "lab"),
])
def test_every_read_command_prints_the_same_data_as_json_and_yaml(
        coordinator: ServedCoordinator, command: tuple[str, ...]) -> None:
    as_json = coordinator.cli_json(*command)
    as_yaml = yaml.safe_load(coordinator.cli(*command, "-o", "yaml").stdout)
    volatile = ("step", "last_seen", "rollout", "stages")  # elapsed times move between the calls

    def stable(value: object) -> object:
        if isinstance(value, dict):
            return {k: stable(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [stable(v) for v in value]
        if isinstance(value, str):  # a note's "failing for 0s, retry in 29s" moves too
            return re.sub(r"\b\d+s\b", "Ns", value)
        return value

    assert stable(as_json) == stable(as_yaml) and as_json


def test_streams_print_one_json_line_or_yaml_document_per_event(coordinator: ServedCoordinator) -> None:
    lines = coordinator.cli("events", "--machine", "w1", "-o", "json").stdout.splitlines()
    docs = [d for d in yaml.safe_load_all(coordinator.cli("events", "--machine", "w1", "-o", "yaml")
                                          .stdout)]
    assert [json.loads(x)["id"] for x in lines] == [d["id"] for d in docs]
    logs = coordinator.cli("machines", "logs", "w1", "-o", "json").stdout.splitlines()
    assert [json.loads(x)["data"]["item"] for x in logs] == ["base", "runtime"]


def test_machine_logs_show_each_items_output_and_follow_new_reports(
        own_coordinator: ServedCoordinator) -> None:
    out = own_coordinator.cli("machines", "logs", "w1").stdout
    assert "prepare/base attempt 1 succeeded (exit 0, 1s)\nbase: configured\n" in out
    assert ("prepare/runtime attempt 2 failed (exit 100, 1s): exit status 100\n"
            "E: Unable to locate package containerd\n") in out
    tail = own_coordinator.cli("machines", "logs", "w1", "--tail", "1").stdout
    assert "runtime" in tail and "base" not in tail

    follow = subprocess.Popen(own_coordinator.cli_argv("machines", "logs", "w1", "--follow"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "containerd" in follow.stdout.readline() + follow.stdout.readline() + \
            follow.stdout.readline() + follow.stdout.readline()
        own_coordinator.report_item(own_coordinator.agents["w1"], "runtime", "succeeded", attempt=3,
                                output="containerd installed\n")
        started = time.monotonic()
        assert "prepare/runtime attempt 3 succeeded" in follow.stdout.readline()
        assert follow.stdout.readline() == "containerd installed\n"
        assert time.monotonic() - started < 5
    finally:
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=10)
    assert follow.returncode == 0 and "Traceback" not in err


def test_a_misspelt_placeholder_is_refused_by_apply_and_the_dry_run_naming_its_line(
        coordinator: ServedCoordinator) -> None:
    """Found by the coordinator, which knows every template value, not by a node failing the
    item forever; nothing is stored."""
    before = coordinator.cli_json("cluster", "get", "lab")
    for command in (("upgrade", "plan", "lab", "-f"), ("cluster", "apply", "-f")):
        result = coordinator.cli(*command, str(MISSPELT), ok=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result
        assert result.stderr.startswith(
            "error: invalid document: line 14: machineTypes.manager[2].action.argv[1]: unknown "
            "placeholder ${machine.hostnme}; did you mean ${machine.hostname}? (known: "
            "${cluster.name}, "), result.stderr
    assert coordinator.cli_json("cluster", "get", "lab") == before


def test_approval_with_labels_and_an_interface_then_labels_changed_kubectl_style(
        own_coordinator: ServedCoordinator) -> None:
    own_coordinator.register("w3", facts=node_facts())
    approved = own_coordinator.cli("approve", "w3", "--role", "worker", "--label", "zone=eu-1a",
                               "--label", "rack=r1", "--interface", "eth1")
    assert approved.stdout == "w3 approved as worker at 10.10.0.5 with labels rack=r1,zone=eu-1a\n"
    relabelled = own_coordinator.cli("machines", "label", "w3", "zone=eu-1b", "rack-", "gpu=")
    assert relabelled.stdout == "w3 labels: gpu=,zone=eu-1b\n"

    listed = own_coordinator.cli("machines", "--show-labels").stdout.splitlines()
    assert listed[0].split() == ["HOSTNAME", "IP", "ROLE", "STATE", "ITEMS", "LABELS", "PROGRESS"]
    assert [line.split()[5] for line in listed[1:]] == ["-", "-", "gpu=,zone=eu-1b"]
    shown = own_coordinator.cli("machines", "get", "w3").stdout
    assert "\nlabels     gpu=,zone=eu-1b\n" in shown
    assert ("\naddress    10.10.0.5 on eth1  (interfaces: eth0 192.0.2.10 fe80::1, eth1 10.10.0.5 "
            "fd10::5, eth2 fe80::2)\n") in shown
    assert re.search(r"\n  /dev/sdb +100\.0 GiB ssd  QEMU HARDDISK  unused\n", shown), shown
    assert re.search(r"\n  /dev/sdc .* in use: dm-0\n", shown), shown


def test_a_refused_choice_or_label_says_why_without_a_traceback(
        coordinator: ServedCoordinator) -> None:
    refused = coordinator.cli("approve", "w2", "--ip", "10.9.9.9", ok=False)
    assert (refused.returncode, refused.stderr) == (
        1, "error: ip: 10.9.9.9 is not an address of w2 (it reported no addresses)\n")
    bad = coordinator.cli("machines", "label", "w2", "zone", ok=False)
    assert bad.returncode == 2 and "Invalid value for LABELS: 'zone': write KEY=VALUE to set " \
        "a label, KEY- to remove it" in bad.stderr, bad.stderr
    bad = coordinator.cli("machines", "label", "w2", "zone=eu west", ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith(
        "error: invalid document: label zone: its value 'eu west' must be empty"), bad.stderr
    assert not coordinator.machine("w2")["approved"]


def test_logs_of_an_unknown_machine_say_so(coordinator: ServedCoordinator) -> None:
    result = coordinator.cli("machines", "logs", "nope", ok=False)
    assert result.returncode == 1
    assert result.stderr == "error: no machine with id or hostname nope, now or deleted\n"


def test_events_filter_by_machine_kind_and_since(coordinator: ServedCoordinator) -> None:
    out = coordinator.cli("events", "--machine", "w1", "--kind", "item", "--since", "10m").stdout
    assert len(out.splitlines()) == 2 and all(" w1 " in x and " item " in x for x in out.splitlines())
    assert coordinator.cli("events", "--since", "2099-01-01T00:00").stdout == ""
    bad = coordinator.cli("events", "--since", "yesterday", ok=False)
    assert bad.returncode == 2 and "--since" in bad.stderr and "'yesterday'" in bad.stderr


def watch_status(served: ServedCoordinator, columns: int) -> tuple[subprocess.Popen[bytes], int]:
    """`status lab --watch` in a terminal that wide: the process, and the terminal to read."""
    return in_terminal(served.cli_argv("status", "lab", "--watch", "--interval", "0.3"), columns)


def test_status_watch_redraws_progress_bars_and_an_eta_in_a_terminal(
        own_coordinator: ServedCoordinator) -> None:
    watch, main = watch_status(own_coordinator, 180)
    try:
        screen = read_terminal(main, "ETA")
        assert "━" in screen  # rich's progress bars
        assert "Machines approved" in screen and "waiting for approval: w2" in screen
        assert "1/3 items on 1 machine " in screen
        own_coordinator.cli("approve", "w2", "--role", "worker")  # the next redraws show it
        read_terminal(main, "2 of 2 approved")
        watch.send_signal(signal.SIGINT)
        rest = ""
        with pytest.raises(OSError):  # EIO once the process closed the terminal
            while True:
                rest += os.read(main, 65536).decode(errors="replace")
        assert watch.wait(timeout=10) == 0 and "Traceback" not in rest
    finally:
        if watch.poll() is None:
            watch.kill()
        os.close(main)


def test_shell_completion_completes_machine_and_cluster_names(coordinator: ServedCoordinator) -> None:
    def complete(words: str) -> list[str]:
        env = {**os.environ, "_COORDINATOR_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
               "COORDINATOR_URL": coordinator.url,
               "COORDINATOR_TOKEN_FILE": str(coordinator.token_file),
               "COORDINATOR_CA": str(coordinator.ca_file)}
        result = subprocess.run([coordinator.cli_argv()[0]], env=env, capture_output=True,
                                text=True, timeout=30, check=True)
        return [line.split(",", 1)[1] for line in result.stdout.splitlines()]

    assert complete("coordinator machines logs ") == ["w1", "w2"]
    assert complete("coordinator approve w2") == ["w2"]
    assert complete("coordinator status ") == ["lab"]
    assert "logs" in complete("coordinator machines ")
    script = coordinator.cli("completion", "bash").stdout
    assert "_COORDINATOR_COMPLETE=bash_complete" in script and "complete -o" in script


def test_machines_are_listed_a_page_at_a_time_as_the_coordinator_filters_and_sorts_them(
        own_coordinator: ServedCoordinator) -> None:
    own_coordinator.register("w3")

    def hostnames(*args: str) -> tuple[list[str], str]:
        shown = own_coordinator.cli("machines", *args)
        return [line.split()[0] for line in shown.stdout.splitlines()[1:]], shown.stderr

    assert hostnames("--limit", "2") == (
        ["w1", "w2"], "showing 1-2 of 3; the next page: --offset 2 (every page: --all)\n")
    assert hostnames("--limit", "2", "--offset", "2") == (["w3"], "showing 3-3 of 3\n")
    assert hostnames("--state", "Pending", "--sort", "-hostname", "--limit", "1", "--all")[0] == [
        "w3", "w2"]
    assert hostnames("--search", "W1", "--responding")[0] == ["w1"]
    assert hostnames("--not-responding") == ([], "no machines here: 0 match\n")
    assert [m["hostname"] for m in own_coordinator.cli_json("machines", "--role", "worker")] == ["w1"]
    assert len(own_coordinator.cli_json("machines", "--limit", "1", "--offset", "1")) == 1
    refused = own_coordinator.cli("machines", "--state", "Deploying", "--sort", "memory", ok=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
    assert "state: unknown state Deploying: a comma-separated list of" in refused.stderr
    assert "sort: must be one of hostname, state, role" in refused.stderr


def test_status_of_a_large_cluster_shows_the_first_machines_and_how_to_page(
        tmp_path: Path) -> None:
    """The table shows the stages and a page of machines, not 250 rows; JSON keeps them all."""
    with running_coordinator(tmp_path) as served:
        seed(served, [pending_machine(n, "lab", time.time()) for n in range(250)])
        out = served.cli("status", "lab").stdout
        assert "250 registered" in out
        shown = [line for line in out.splitlines() if re.match(r"\s*node-\d{5}\s", line)]
        assert len(shown) == 100 and shown[0].split()[0] == "node-00000"
        assert "the first 100 of 250 machines: `coordinator machines --cluster lab` pages" \
            in " ".join(out.split())
        assert len(json.loads(served.cli("status", "lab", "-o", "json").stdout)["machines"]) == 250
