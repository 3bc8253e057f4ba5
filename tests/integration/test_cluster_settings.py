"""The cluster's settings for its nodes reach a real `nodeagent run`: its NTP servers and
skew limit decide the clock check of a node whose config names none, and its proxy carries
the node's downloads from URLs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.prechecks import NAMES
from tests.support.blob import BLOB, BLOB_SHA, blob_server
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.ntp_responder import skewed_ntp_server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
HOSTNAME = "settings-node"
# A loopback node cannot pass the host-bound checks; only the clock checks count here.
IGNORED = sorted(set(NAMES) - {"ntp-reachable", "time-skew"})
# Resolves nowhere: only a proxy can deliver it.
ARTIFACT_URL = "http://artifacts.example.invalid/blob"


def cluster(ntp_server: str, max_skew: int, proxy: str) -> str:
    return f"""\
name: lab
release: "1"
settings:
  ntp: {{servers: ["{ntp_server}"], maxSkewSeconds: {max_skew}}}
  proxy: {{http: "{proxy}"}}
  retry: {{baseSeconds: 0.2, maxSeconds: 1}}
machineTypes:
  worker:
    - name: tool
      phase: prepare
      action: {{type: download, url: "{ARTIFACT_URL}", sha256: {BLOB_SHA}, path: /opt/tool}}
    - name: settings
      phase: prepare
      action:
        type: file
        path: /etc/lab/settings
        template: "${{ntp.servers}} ${{ntp.maxSkewSeconds}} ${{proxy.http}}"
"""


def start_agent(coordinator: ServedCoordinator, tmp: Path) -> subprocess.Popen[bytes]:
    join = coordinator.cli("join-token", "create", "lab").stdout.strip()
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    config = tmp / "agent.yaml"
    config.write_text(f"join: {join}\nstateDir: {root}/var/lib/nodeagent\nheartbeatSeconds: 1\n"
                      f"ignorePrechecks: [{', '.join(IGNORED)}]\n")
    log = (tmp / "agent.log").open("wb")
    return subprocess.Popen([NODEAGENT, "run", "--config", str(config), "--root", str(root)],
                            stdout=log, stderr=subprocess.STDOUT)


def clock_check(coordinator: ServedCoordinator) -> dict[str, Any]:
    machines = coordinator.admin.all_machines()
    if not machines:
        return {}
    report = coordinator.machine(machines[0]["id"]).get("precheck") or {}
    return next((c for c in report.get("checks", []) if c["name"] == "time-skew"), {})


def test_the_clusters_ntp_and_proxy_settings_govern_the_node(tmp_path: Path) -> None:
    with running_coordinator(tmp_path, cluster=None) as coordinator, \
            skewed_ntp_server(30.0) as ntp, blob_server() as server:
        apply = tmp_path / "cluster.yaml"
        apply.write_text(cluster(ntp.address, 5, server.url))
        coordinator.cli("cluster", "apply", "-f", str(apply))
        agent = start_agent(coordinator, tmp_path)
        try:
            # The node's config names no NTP servers: its clock is checked against the
            # cluster's, with the cluster's limit, and found 30 s off.
            wait_until(lambda: clock_check(coordinator).get("status") == "fail",
                       30, "the clock check against the cluster's server")
            assert "(limit 5s)" in clock_check(coordinator)["message"]
            machine = coordinator.admin.all_machines()[0]
            refused = coordinator.cli("approve", machine["id"], "--role", "worker", ok=False)
            assert refused.returncode != 0 and "time-skew" in refused.stdout + refused.stderr

            # A looser cluster limit: the node checks again at once and becomes approvable.
            apply.write_text(cluster(ntp.address, 100, server.url))
            coordinator.cli("cluster", "apply", "-f", str(apply))
            wait_until(lambda: clock_check(coordinator).get("status") in ("pass", "warn"),
                       30, "the clock check with the new limit")
            coordinator.cli("approve", machine["id"], "--role", "worker")
            # A lone worker prepares, then waits for a manager: its prepare items are the proof.
            wait_until(lambda: (tmp_path / "root/etc/lab/settings").exists(), 60, "the prepare items")
        finally:
            agent.terminate()
            agent.wait(timeout=15)
    root = tmp_path / "root"
    assert (root / "opt/tool").read_bytes() == BLOB  # through the cluster's proxy
    assert server.targets == ["artifacts.example.invalid"]
    assert (root / "etc/lab/settings").read_text() == f"{ntp.address} 100 {server.url}"
