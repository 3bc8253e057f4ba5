"""The coordinator's own log (stderr of `coordinator serve`): one logfmt line with stable keys
for each registration, approval, refusal (with why; a flood logged once, then counted), state
change, cluster change, drain outcome and error; never a secret."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
from pathlib import Path

import pytest

from coordinator.cli.client import ClientError
from tests.support.builders import DRAINING_CLUSTER, registration
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.kubeapi import Cluster, kube_api_server, rolled_out_marked
from tests.support.waiting import wait_until

FLOOD = 30
_PAIR = re.compile(r'([A-Za-z_][\w-]*)=("(?:[^"\\]|\\.)*"|\S*)')


def parsed(line: str) -> dict[str, str]:
    """A logfmt line's keys and values (quoted ones unquoted)."""
    return {key: json.loads(value) if value.startswith('"') else value
            for key, value in _PAIR.findall(line)}


def lines(c: ServedCoordinator, **wanted: str) -> list[dict[str, str]]:
    """The log's lines whose keys have the wanted values."""
    found = [parsed(line) for line in c.log.read_text().splitlines()]
    return [f for f in found if all(f.get(k) == v for k, v in wanted.items())]


def test_the_coordinator_logs_what_happens_once_each_with_stable_keys(tmp_path: Path) -> None:
    nodes = Cluster()
    nodes.add_node("m1")
    nodes.add_node("w1")
    with contextlib.ExitStack() as stack:
        kube = stack.enter_context(kube_api_server(nodes))
        kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
        c = stack.enter_context(running_coordinator(
            tmp_path, DRAINING_CLUSTER.format(release="1.0", kubeconfig=kubeconfig)))
        rolled_out_marked(c, kube, {"m1": "manager", "w1": "worker"})
        c.admin.request("PUT", "/v1/clusters", content_type="application/yaml",
                        text=DRAINING_CLUSTER.format(release="2.0", kubeconfig=kubeconfig))
        wait_until(lambda: (c.machine("w1")["drain"] or {}).get("stage") == "Drained", 30,
                   "w1 drained")

        for attempt in range(FLOOD):  # a flood of strangers: logged once, then counted
            stranger = f"join_{'x' * 30}{attempt:03d}"
            with pytest.raises(ClientError):
                c.client(stranger).request("POST", "/v1/agent/register",
                                           body=registration("intruder", stranger))
            with pytest.raises(ClientError):
                c.client(f"admin_{'y' * 30}{attempt:03d}").get("/v1/machines")
        taken = c.join_token()  # a known token, a hostname already a member: 409, saying why
        with pytest.raises(ClientError):
            c.client(taken).request("POST", "/v1/agent/register", body=registration("m1", taken))

        # The store locked by another process past its busy timeout: the heartbeats queued
        # and an operator's change cannot be written, errors (the change answered 500).
        locked, release = threading.Event(), threading.Event()

        def hold_the_database() -> None:
            conn = sqlite3.connect(c.data / "coordinator.db", isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            locked.set()
            release.wait(60)
            conn.execute("ROLLBACK")
            conn.close()

        holder = threading.Thread(target=hold_the_database)
        holder.start()
        try:
            assert locked.wait(10)
            c.heartbeat(c.agents["m1"])
            with pytest.raises(ClientError) as failed:
                c.admin.request("PATCH", "/v1/machines/m1/labels", body={"set": {"rack": "r1"}})
            assert failed.value.status == 500 and "coordinator's log" in str(failed.value)
            wait_until(lambda: len(lines(c, event="error")) >= 2, 30, "two error lines")
        finally:
            release.set()
            holder.join()
    # Stopped: the refusals counted since the last minute are written, and logged.

    for hostname in ("m1", "w1"):
        (registered,) = lines(c, event="registered", machine=hostname)
        assert registered["cluster"] == "lab" and registered["level"] == "info"
        assert registered["machine_id"] == c.agents[hostname]["machine_id"]
        assert lines(c, event="approved", machine=hostname, cluster="lab")
    moves = [(f["from"], f["to"]) for f in lines(c, event="state", machine="w1")]
    assert ("Ready", "Upgrade") in moves and moves[0][0] == "Pending", moves
    assert lines(c, event="cluster-applied", cluster="lab", release="2.0", generation="2")
    assert [f["stage"] for f in lines(c, event="drain", machine="w1")][-1] == "Drained"

    first = lines(c, event="refused", what="registration", status="401")
    assert len(first) == 1 and first[0]["msg"] == "registration refused (401): unknown join token"
    assert len(lines(c, event="refused", what="admin request", status="401")) == 1
    (conflict,) = lines(c, event="refused", what="registration", status="409")
    assert "m1 is already a member of lab" in conflict["msg"]
    counted = {(f["what"], f["status"]): f["refused"] for f in lines(c, event="audit")
               if "refused" in f}
    assert counted == {("registration", "401"): str(FLOOD), ("admin request", "401"): str(FLOOD)}
    errors = {f["msg"]: f for f in lines(c, event="error", level="error")}
    assert "database is locked" in errors["writing heartbeats failed"]["exception"]
    failed_change = errors["PATCH /v1/machines/m1/labels failed"]
    assert (failed_change["method"], failed_change["path"]) == ("PATCH", "/v1/machines/m1/labels")
    assert "database is locked" in failed_change["exception"]

    log = c.log.read_text()
    secrets = [c.token_file.read_text().strip(), *(a["credential"] for a in c.agents.values())]
    assert not [s for s in secrets if s in log]
