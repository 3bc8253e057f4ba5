"""The control plane's certificates, end to end: the kubeadm profile on a manager (a real agent
in a network namespace, the doubles of tests/support/k8s_doubles first in its PATH), its
ClusterConfiguration signing certificates for 20 days, so `coordinator status` warns of the
admin.conf the coordinator drains through; a maintenance release that only changes
settings.kubernetes.certificateRenewal drains the manager, runs `kubeadm certs renew all` there
and restarts its control plane, and the coordinator holds the renewed admin.conf (its expiry
moved by the 10 days the cluster's clock went on), which is the one on the manager's disk."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tests.support.k8s_doubles.calls import agent_env, calls
from tests.support.k8s_doubles.control import advance, stop_all
from tests.support.k8s_doubles.kubeadm import client_certificate
from tests.support.k8s_doubles.network import NetworkPlugin
from tests.support.k8s_doubles.pki import not_after
from tests.support.kubeadm_profile import PROFILE
from tests.support.kubeapi import Cluster, kube_api_server
from tests.support.lan import HUB_IP, Lan
from tests.support.requirements import require_binary
from tests.support.rollout import all_ready, fleet

DAY = 86400.0
SHORT = '          certificateValidityPeriod: 480h   # 20 days\n'


def test_an_expiring_certificate_warns_and_a_renewal_release_moves_the_coordinators(
        tmp_path: Path) -> None:
    require_binary("etcd")
    require_binary("etcdctl")
    version = '          kubernetesVersion: "v${kubernetes.version}"\n'
    profile = PROFILE.read_text().replace(version, version + SHORT)
    assert SHORT in profile
    renewal = (profile.replace('release: "1.33.4"', 'release: "1.33.4-certificates"')
               .replace('certificateRenewal: &certificates "initial"',
                        'certificateRenewal: &certificates "2027-06"'))
    log_path, state = tmp_path / "doubles.log", tmp_path / "doubles-state"

    def on_the_lan(network: Lan, stack: contextlib.ExitStack) -> dict[str, str]:
        server = stack.enter_context(kube_api_server(Cluster(ready_delay=0.2),
                                                     netns=network.hub.name, host=HUB_IP))
        stack.enter_context(NetworkPlugin(server, log_path))
        stack.callback(stop_all, state)  # the kubelet double, static pods and etcd
        return agent_env(log_path, state, server.url)

    with fleet(tmp_path, managers=["m1"], workers=[], cluster_spec=profile,
               agent_env=on_the_lan) as f:
        f.wait_for("m1 Ready", lambda: all_ready(f), timeout=150)
        certificates = f.admin_json("status", "k8s")["certificates"]
        assert certificates["source"] == "reported by m1"
        assert certificates["warning"].endswith("in 19 days")
        assert "settings.kubernetes.certificateRenewal" in certificates["remedy"]
        first = certificates["not_after"]
        shown = f.admin("status", "k8s")
        assert "certificates: the client certificate of the kubeconfig the coordinator uses" \
            in shown

        advance(state, 10 * DAY)  # kubeadm renews on the cluster's clock: 10 days later
        (tmp_path / "renewal.yaml").write_text(renewal)
        f.admin("cluster", "apply", "-f", str(tmp_path / "renewal.yaml"))
        f.wait_for("m1 renewed, Ready at the new release", lambda: all(
            m["state"] == "Ready" and m["release"] == "1.33.4-certificates"
            for m in f.admin_json("machines")), timeout=150)
        renewed = f.admin_json("status", "k8s")["certificates"]
        snapshots = f.admin_json("cluster", "etcd-snapshots", "k8s")
        on_disk = not_after(client_certificate(
            (f.root("m1") / "etc/kubernetes/admin.conf").read_text()) or "")

    assert renewed["not_after"] == on_disk
    assert 10 * DAY <= renewed["not_after"] - first < 10 * DAY + 600
    log = calls(log_path)
    assert [(c.host, c.exit) for c in log if c.is_("kubeadm", "certs", "renew")] == [("m1", 0)]
    assert not [c for c in log if c.is_("kubeadm", "upgrade")], "only certs-renew ran"
    # with an etcd snapshot before it, which the coordinator keeps
    assert [(s["subject"], s["item"], s["release"]) for s in snapshots] == [
        ("m1", "etcd-snapshot-before-renewal", "1.33.4-certificates")]
