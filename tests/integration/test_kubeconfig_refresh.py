"""A real `nodeagent run` against a real coordinator: the kubeconfig a manager's item reported
is watched on disk once the item ran, so certificates renewed on the node (by hand, `kubeadm
certs renew`) reach the coordinator without a release: the status shows the new expiry; an
older copy put back is kept out, and the status keeps the renewed one."""

from __future__ import annotations

import json
import time
from pathlib import Path

from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL
from tests.support.agent import agent_of
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.k8s_doubles import pki
from tests.support.kubeapi import Cluster, kube_api_server
from tests.support.waiting import wait_until

DAY = 86400.0
ADMIN_CONF = "etc/kubernetes/admin.conf"


def cluster(kubeconfig: str) -> str:
    """A manager whose deploy item leaves a kubeconfig, as kubeadm init leaves admin.conf."""
    return f"""\
name: lab
release: "1"
settings: {{drain: {{enabled: false}}}}
machineTypes:
  manager:
    - name: init
      phase: deploy
      kubeconfigFrom: /{ADMIN_CONF}
      action: {{type: file, path: /{ADMIN_CONF}, mode: "0600", content: {json.dumps(kubeconfig)}}}
"""


def expiry(coordinator: ServedCoordinator) -> float | None:
    certificates = coordinator.admin.get("/v1/clusters/lab/status?machines=false")["certificates"]
    return None if certificates is None else certificates["not_after"]


def test_a_kubeconfig_renewed_on_the_node_reaches_the_coordinator_and_an_older_one_does_not(
        tmp_path: Path) -> None:
    authority = pki.ca({}, "ca", "kubernetes")
    with kube_api_server(Cluster()) as kube:
        def admin_conf(days: float) -> tuple[str, float]:
            expires = float(int(time.time() + days * DAY))
            return pki.admin_kubeconfig(kube.url, authority, expires), expires

        first, first_expiry = admin_conf(20)
        with running_coordinator(tmp_path, cluster(first)) as coordinator, \
                agent_of(coordinator, tmp_path):
            (machine,) = coordinator.admin.all_machines()
            with kube.locked() as api:
                api.add_node("m1", {MACHINE_ID_LABEL: machine["id"]})
            coordinator.cli("approve", machine["id"], "--role", "manager")
            coordinator.wait_state(machine["hostname"], "Ready", timeout=60)
            assert expiry(coordinator) == first_expiry

            renewed, renewed_expiry = admin_conf(365)  # `kubeadm certs renew all` on the node
            (tmp_path / "root" / ADMIN_CONF).write_text(renewed)
            wait_until(lambda: expiry(coordinator) == renewed_expiry, 30,
                       "the renewed kubeconfig taken")

            older, _ = admin_conf(5)  # an old copy put back
            (tmp_path / "root" / ADMIN_CONF).write_text(older)

            def kept_out() -> bool:
                events = coordinator.admin.get("/v1/events?cluster=lab&kind=kubeconfig")
                return any("an older copy, kept out" in e["message"] for e in events)
            wait_until(kept_out, 30, "the older copy kept out")
            assert expiry(coordinator) == renewed_expiry
