"""What a registration does, without a store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.machines.registration import Credential, registered, registered_before
from coordinator.domain.model import ClusterSettings, Machine, MachineState, same_hostname
from coordinator.domain.records import CredentialOwner
from nodeagent.wire.protocol import PrecheckReport, RegisterRequest
from tests.support.builders import OLD_KERNEL, machine, precheck_report

CREDENTIAL = Credential("hash", None)


def request(hostname: str, failing: bool = False) -> RegisterRequest:
    return RegisterRequest(join_token="t", hostname=hostname, ip="10.0.0.9",
                           precheck=PrecheckReport.model_validate(
                               precheck_report(hostname, failing=OLD_KERNEL if failing else None)))


def test_a_new_machine_is_pending_and_auto_approved_only_when_its_prechecks_pass() -> None:
    auto = ClusterSettings(autoApprove=True, autoApproveRole="worker")
    ok, events = registered("edge", auto, None, request("w1"), CREDENTIAL, "id-1", 5.0)
    assert (ok.id, ok.state, ok.approved, ok.role) == ("id-1", MachineState.PENDING, True, "worker")
    assert [e.kind for e in events] == ["registered", "approved"]
    failing, events = registered("edge", auto, None, request("w2", failing=True), CREDENTIAL, "id-2", 5.0)
    assert not failing.approved
    assert "hard prechecks failed: kernel: kernel too old" in events[0].message


def test_a_pending_machine_cannot_be_displaced_by_another_agents_registration() -> None:
    """Same join token, same hostname, another credential: approving w1 would approve the
    newcomer, so it is refused (its own agent retries with its credential: registered_before)."""
    before = replace(machine("w1", approved=False), credential_hash="old")
    with pytest.raises(Conflict, match=r"w1 is already registered in edge by another agent"):
        registered("edge", ClusterSettings(), before, request("w1"), CREDENTIAL, "id-new", 9.0)


def test_an_admitted_machine_cannot_be_taken_over_by_a_registration() -> None:
    with pytest.raises(Conflict, match="already a member of edge"):
        registered("edge", ClusterSettings(), machine("w1"), request("w1"), CREDENTIAL, "id-x", 1.0)


def test_a_hostname_differing_only_in_case_is_the_same_machine_and_is_refused_naming_it() -> None:
    """Kubernetes names a Node by the lowercased hostname: W1 beside w1 would be one Node."""
    assert same_hostname("W1", "w1") and same_hostname("node-A.lab", "NODE-a.LAB")
    assert not same_hostname("w1", "w11")
    member = machine("w1", state=MachineState.READY)
    with pytest.raises(Conflict) as refused:
        registered("edge", ClusterSettings(), member, request("W1"), CREDENTIAL, "id-x", 1.0)
    assert str(refused.value) == (
        "W1 is already a member of edge (Ready, as w1, id id-w1: Kubernetes node names are "
        "lowercase, so both would be one Node); delete it first to register anew")
    pending = replace(member, approved=False, state=MachineState.PENDING)
    with pytest.raises(Conflict, match=r"W1 is already registered in edge by another agent "
                                       r"\(Pending, as w1, id id-w1: "):
        registered("edge", ClusterSettings(), pending, request("W1"), CREDENTIAL, "id-x", 1.0)
    owner = CredentialOwner("id-w1", "edge", "w1", expires_at=None, responding=True)
    assert registered_before(owner, request("W1")) == "id-w1"  # its own credential: the same machine


def test_a_retried_registration_gets_the_machine_its_credential_registered() -> None:
    """The answer to the first attempt was lost; the agent retries with the credential it
    chose and saved before that attempt."""
    owner = CredentialOwner("id-w1", "edge", "w1", expires_at=None, responding=True)
    assert registered_before(owner, request("w1")) == "id-w1"
    with pytest.raises(Conflict, match=r"credential is that of machine w1 \(id-w1\) in edge, not of w2"):
        registered_before(owner, request("w2"))


# A registration as a table: the cluster's auto-approval, the machine its hostname already
# names (none, Pending, a member), the hostname the node sends and whether its hard prechecks
# fail, and what comes of it: the new machine's approval and events, or the refusal.
AUTO = ClusterSettings(autoApprove=True, autoApproveRole="worker")
PENDING_W1 = replace(machine("w1", approved=False), credential_hash="old")
MEMBER_W1 = machine("w1", state=MachineState.READY)
REGISTRATIONS = [
    pytest.param(ClusterSettings(), None, "w1", False, (False, ["registered"]),
                 id="a new machine waits Pending for the operator"),
    pytest.param(AUTO, None, "w1", False, (True, ["registered", "approved"]),
                 id="auto-approved when its prechecks pass"),
    pytest.param(AUTO, None, "w1", True, (False, ["registered"]),
                 id="held Pending when its hard prechecks fail"),
    pytest.param(AUTO, PENDING_W1, "w1", False, "w1 is already registered in edge by another "
                 "agent (Pending)", id="a Pending machine is not displaced"),
    pytest.param(AUTO, MEMBER_W1, "w1", False, "w1 is already a member of edge (Ready)",
                 id="a member is not taken over"),
    pytest.param(ClusterSettings(), MEMBER_W1, "W1", False, "W1 is already a member of edge "
                 "(Ready, as w1, id id-w1", id="nor by its name in another case"),
]


@pytest.mark.parametrize(("settings", "existing", "hostname", "failing", "outcome"),
                         REGISTRATIONS)
def test_registration_table(settings: ClusterSettings, existing: Machine | None, hostname: str,
                            failing: bool, outcome: tuple[bool, list[str]] | str) -> None:
    if isinstance(outcome, str):
        with pytest.raises(Conflict) as refused:
            registered("edge", settings, existing, request(hostname, failing), CREDENTIAL,
                       "id-new", 5.0)
        assert str(refused.value).startswith(outcome)
        return
    new, events = registered("edge", settings, existing, request(hostname, failing),
                             CREDENTIAL, "id-new", 5.0)
    assert (new.id, new.state, new.credential_hash) == ("id-new", MachineState.PENDING, "hash")
    assert (new.approved, [e.kind for e in events]) == outcome
    assert ("hard prechecks failed" in events[0].message) is failing
