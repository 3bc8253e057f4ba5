"""The control plane's certificate expiry in the status, and the rule a reported kubeconfig is
held to: dates and subjects only, a warning 30 days ahead with what to run, never an older copy
taken for the one held, whether an item's report or the agent's refresh brings it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from coordinator.domain.assignments.reports import fold_report, refresh_kubeconfig
from coordinator.domain.errors import Conflict
from coordinator.domain.model import MachineState
from coordinator.domain.nodes.certificates import certificate_status
from coordinator.domain.nodes.kubeaccess import KubeAccess
from coordinator.domain.nodes.kubeconfig import kubeconfig_problem
from nodeagent.wire.protocol import ItemReport, StateItem
from tests.support.builders import cluster, decided, machine
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
    assert shown.remedy.startswith("on each manager `kubeadm certs renew all`, then restart its "
                                   "control-plane pods")
    assert "the agents send the renewed kubeconfig" in shown.remedy
    from_file = certificate_status("k8s", KubeAccess(path="/etc/coordinator/k8s.conf"),
                                   admin_conf(-1), NOW)
    assert from_file.source == "settings.kubernetes.kubeconfig (/etc/coordinator/k8s.conf)"
    assert "replace /etc/coordinator/k8s.conf with" in from_file.remedy


def test_a_token_user_has_no_expiry_and_a_broken_certificate_is_a_problem() -> None:
    token = ("clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
             "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
             "users: [{name: u, user: {token: abc}}]\n")
    shown = certificate_status("k8s", REPORTED, token, NOW)
    assert shown.not_after is None and "has no client-certificate-data" in shown.problem
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

    assert decided(fold_report(spec, (), m1, sent(renewed), now=NOW)).machine.kubeconfig == renewed
    kept = decided(fold_report(spec, (), m1, sent(older), now=NOW))
    assert kept.machine.kubeconfig == held
    assert [e.message for e in kept.events if e.kind == "kubeconfig"] == [
        "m1: the kubeconfig item init left in /etc/kubernetes/admin.conf has a client "
        "certificate that expires before the one held (2027-02-04T08:00:00Z): an older copy, "
        "kept out"]


def test_an_applied_items_file_sent_again_is_taken_unless_older_and_only_from_its_manager() -> None:
    """A Ready manager's agent sends again the admin.conf its init item reported, renewed on
    disk: taken; an older copy, or one naming another API server, kept out; an item it did not
    apply in this version, another item, a worker or a manager being deleted: refused."""
    source = StateItem.model_validate({"name": "init", "phase": "deploy",
                                       "kubeconfigFrom": "/etc/kubernetes/admin.conf",
                                       "action": {"type": "exec", "argv": ["true"]}})
    other = StateItem.model_validate({"name": "cni", "phase": "deploy",
                                      "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[source, other])
    held, renewed, older = admin_conf(20), admin_conf(365), admin_conf(10)
    applied = frozenset({source.fingerprint(), other.fingerprint()})
    m1 = replace(machine("m1", "manager", state=MachineState.READY), kubeconfig=held,
                 applied=applied)
    taken = decided(refresh_kubeconfig(spec, m1, "init", source.fingerprint(), renewed, NOW))
    assert taken.machine.kubeconfig == renewed
    assert [e.message for e in taken.events] == [
        "m1 reported a kubeconfig (item init, /etc/kubernetes/admin.conf): drains use the "
        "first manager's unless settings.kubernetes.kubeconfig is set"]
    kept = decided(refresh_kubeconfig(spec, m1, "init", source.fingerprint(), older, NOW))
    assert kept.machine.kubeconfig == held and "an older copy, kept out" in kept.events[0].message
    elsewhere = pki.admin_kubeconfig("https://rogue.example:6443", AUTHORITY, NOW + 365 * DAY)
    moved = decided(refresh_kubeconfig(spec, m1, "init", source.fingerprint(), elsewhere, NOW))
    assert moved.machine.kubeconfig == held
    assert "names another API server (https://rogue.example:6443) than the one held " \
           "(https://10.0.0.1:6443): kept out" in moved.events[0].message
    refused = [(m1, "init", "0" * 16), (m1, "cni", other.fingerprint()),
               (replace(m1, applied=frozenset()), "init", source.fingerprint()),
               (replace(m1, role="worker"), "init", source.fingerprint()),
               (replace(m1, state=MachineState.DELETING), "init", source.fingerprint())]
    for sender, name, fingerprint in refused:
        with pytest.raises(Conflict, match="cannot send its file again"):
            refresh_kubeconfig(spec, sender, name, fingerprint, renewed, NOW)


# A kubeconfig's refresh decided whole, as a table: the file sent, and what the one change
# writes (nothing at all when the file is the one held).
@pytest.mark.parametrize(("days", "taken", "kinds"), [
    (20, False, []),  # the file held: nothing to write
    (365, True, ["kubeconfig"]),  # renewed: taken
    (10, False, ["kubeconfig"]),  # an older copy: kept out, said
], ids=["same", "renewed", "older"])
def test_a_kubeconfig_refresh_is_one_change(days: int, taken: bool, kinds: list[str]) -> None:
    source = StateItem.model_validate({"name": "init", "phase": "deploy",
                                       "kubeconfigFrom": "/etc/kubernetes/admin.conf",
                                       "action": {"type": "exec", "argv": ["true"]}})
    spec, held = cluster(manager=[source]), admin_conf(20)
    m1 = replace(machine("m1", "manager", state=MachineState.READY), kubeconfig=held,
                 applied=frozenset({source.fingerprint()}))
    sent = held if days == 20 else admin_conf(days)
    change = refresh_kubeconfig(spec, m1, "init", source.fingerprint(), sent, NOW)
    assert [e.kind for e in change.events] == kinds
    assert [m.kubeconfig == sent for m in change.machines] == ([taken] if kinds else [])
    assert change.writes is bool(kinds)
    assert (change.kick, list(change.wake)) == (False, [])
