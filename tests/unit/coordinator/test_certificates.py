"""The control plane's certificate expiry in the status, and the rule a reported kubeconfig is
held to: dates and subjects only, a warning 30 days ahead with what to run, never an older copy
taken for the one held."""

from __future__ import annotations

import json
from dataclasses import replace

from coordinator.domain.certificates import certificate_status
from coordinator.domain.kubeaccess import KubeAccess
from coordinator.domain.kubeconfig import kubeconfig_problem
from coordinator.domain.model import MachineState
from coordinator.domain.reports import fold_report
from nodeagent.protocol import ItemReport, StateItem
from tests.support.builders import cluster, machine
from tests.support.k8s_doubles import pki

NOW = 1_800_000_000.0
DAY = 86400.0
AUTHORITY = pki.ca({}, "ca", "kubernetes", at=NOW - 100 * DAY)


def admin_conf(days_left: float) -> str:
    """kubeadm's admin.conf whose client certificate expires days_left after NOW."""
    return pki.admin_kubeconfig("https://10.0.0.1:6443", AUTHORITY, NOW + days_left * DAY)


REPORTED = KubeAccess(text="", reporter="m1")


def test_the_status_shows_the_expiry_and_subject_and_never_the_certificate() -> None:
    text = admin_conf(200)
    shown = certificate_status("k8s", REPORTED, text, NOW)
    assert shown.source == "reported by m1"
    assert shown.subject == "CN=kubernetes-admin,O=kubeadm:cluster-admins"
    assert abs(shown.not_after - (NOW + 200 * DAY)) < 1 and not shown.warning
    user = json.loads(text)["users"][0]["user"]
    assert all(user["client-key-data"] not in str(v) and user["client-certificate-data"] not in
               str(v) and "BEGIN" not in str(v) for v in vars(shown).values())


def test_thirty_days_ahead_it_warns_with_what_to_run() -> None:
    shown = certificate_status("k8s", REPORTED, admin_conf(12.5), NOW)
    assert shown.warning == (
        "the client certificate of the kubeconfig the coordinator uses (reported by m1, "
        "CN=kubernetes-admin,O=kubeadm:cluster-admins) expires at 2027-01-27T20:00:00Z, in 12 days")
    assert "settings.kubernetes.certificateRenewal" in shown.remedy
    assert "`coordinator upgrade plan k8s -f FILE`" in shown.remedy
    assert not certificate_status("k8s", REPORTED, admin_conf(30.1), NOW).warning


def test_once_expired_it_says_what_fails_and_the_way_back_in() -> None:
    shown = certificate_status("k8s", REPORTED, admin_conf(-1), NOW)
    assert "expired at" in shown.warning and "drains, Node checks and removals fail" in shown.warning
    assert "kubeadm certs renew all" in shown.remedy and "settings.kubernetes.kubeconfig" in shown.remedy
    from_file = certificate_status("k8s", KubeAccess(path="/etc/coordinator/k8s.conf"),
                                   admin_conf(-1), NOW)
    assert from_file.source == "settings.kubernetes.kubeconfig (/etc/coordinator/k8s.conf)"
    assert "replace /etc/coordinator/k8s.conf with" in from_file.remedy


def test_a_token_user_has_no_expiry_and_a_broken_certificate_is_a_problem() -> None:
    token = ("clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
             "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
             "users: [{name: u, user: {token: abc}}]\n")
    shown = certificate_status("k8s", REPORTED, token, NOW)
    assert shown.not_after is None and "no client certificate" in shown.problem
    broken = token.replace("{token: abc}", "{client-certificate-data: bm90IGEgY2VydA==}")
    assert kubeconfig_problem(broken) == "client-certificate-data is not a base64 PEM certificate"


def test_a_reported_kubeconfig_older_than_the_one_held_is_kept_out() -> None:
    """A renewal reports the new admin.conf and it replaces the one held; a copy whose client
    certificate expires sooner (an older file reported again) never does, and says so."""
    source = StateItem.model_validate({"name": "init", "phase": "deploy",
                                       "kubeconfigFrom": "/etc/kubernetes/admin.conf",
                                       "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[source])
    held, renewed, older = admin_conf(20), admin_conf(365), admin_conf(10)
    m1 = replace(machine("m1", "manager", state=MachineState.DEPLOY), kubeconfig=held)

    def sent(text: str) -> ItemReport:
        return ItemReport(item="init", fingerprint=source.fingerprint(), phase="deploy",
                          status="succeeded", attempt=1, started_at=1.0, kubeconfig=text)

    assert fold_report(spec, (), m1, sent(renewed), now=NOW).machine.kubeconfig == renewed
    kept = fold_report(spec, (), m1, sent(older), now=NOW)
    assert kept.machine.kubeconfig == held
    assert [e.message for e in kept.events if e.kind == "kubeconfig"] == [
        "m1: the kubeconfig item init left in /etc/kubernetes/admin.conf has a client "
        "certificate that expires before the one held (2027-02-04T08:00:00Z): an older copy, "
        "kept out"]
