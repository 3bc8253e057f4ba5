"""What a registration does, without a store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.changes import TokenUse
from coordinator.domain.errors import Conflict
from coordinator.domain.machines.registration import Credential, registered, registered_before, rotated
from coordinator.domain.machines.tokens import token_hash
from coordinator.domain.model import ClusterSettings, Machine, MachineState, same_hostname
from coordinator.domain.records import CredentialOwner
from nodeagent.wire.protocol import PrecheckReport, RegisterRequest
from tests.support.builders import OLD_KERNEL, change_or_refusal, decided, machine, precheck_report

CREDENTIAL = Credential("hash", None)


def request(hostname: str, failing: bool = False) -> RegisterRequest:
    return RegisterRequest(join_token="t", hostname=hostname, ip="10.0.0.9",
                           precheck=PrecheckReport.model_validate(
                               precheck_report(hostname, failing=OLD_KERNEL if failing else None)))


def test_a_new_machine_is_pending_and_auto_approved_only_when_its_prechecks_pass() -> None:
    auto = ClusterSettings(autoApprove=True, autoApproveRole="worker")
    ok, events = decided(registered("edge", auto, None, request("w1"), CREDENTIAL, "id-1", 5.0))
    assert (ok.id, ok.state, ok.approved, ok.role) == ("id-1", MachineState.PENDING, True, "worker")
    assert [e.kind for e in events] == ["registered", "approved"]
    failing, events = decided(registered("edge", auto, None, request("w2", failing=True),
                                         CREDENTIAL, "id-2", 5.0))
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
    new, events = decided(registered("edge", settings, existing, request(hostname, failing),
                                     CREDENTIAL, "id-new", 5.0))
    assert (new.id, new.state, new.credential_hash) == ("id-new", MachineState.PENDING, "hash")
    assert (new.approved, [e.kind for e in events]) == outcome
    assert ("hard prechecks failed" in events[0].message) is failing


# Registration decided whole, as a table: the machine of that hostname already in the
# cluster, the cluster's settings, and what the change is (or the refusal).
MEMBER = replace(machine("w1", state=MachineState.READY), id="id-old")
PENDING = replace(machine("w1", None, approved=False), id="id-old")


@pytest.mark.parametrize(("existing", "settings", "kinds", "refused"), [
    (None, ClusterSettings(), ["registered"], None),
    (None, ClusterSettings(autoApprove=True, autoApproveRole="worker"),
     ["registered", "approved"], None),
    (PENDING, ClusterSettings(), [], "already registered in edge by another agent"),
    (MEMBER, ClusterSettings(), [], "already a member of edge"),
], ids=["new", "new-auto-approved", "pending-taken", "member-taken"])
def test_a_registration_is_one_change_with_its_join_tokens_use(
        existing: Machine | None, settings: ClusterSettings, kinds: list[str],
        refused: str | None) -> None:
    """The new machine, its events, the join token's use counted with it (by the token's hash,
    at the time of the registration) and a pass asked for; a refusal decides nothing."""
    change = change_or_refusal(lambda: registered("edge", settings, existing, request("w1"),
                                                  CREDENTIAL, "id-1", 5.0), refused)
    if change is None:
        return
    assert [(m.id, m.hostname, m.credential_hash) for m in change.machines] == [
        ("id-1", "w1", "hash")]
    assert [e.kind for e in change.events] == kinds
    assert change.token_use == TokenUse(token_hash("t"), 5.0)
    assert (change.kick, list(change.wake), change.removed) == (True, [], {})


@pytest.mark.parametrize(("owner", "refused"), [
    (None, None),  # a credential nobody holds
    (CredentialOwner("id-1", "edge", "w1", 50.0, True), None),  # its own again: a lost answer retried
    (CredentialOwner("id-2", "edge", "w2", 50.0, True), "another machine holds this credential"),
], ids=["new", "its-own", "anothers"])
def test_a_credential_rotation_is_one_change_or_refused(owner: CredentialOwner | None,
                                                        refused: str | None) -> None:
    held = replace(machine("w1", state=MachineState.READY), id="id-1", credential_hash="old")
    change = change_or_refusal(lambda: rotated(held, owner, Credential("new", 90.0), 10.0),
                               refused)
    if change is None:
        return
    [updated] = change.machines
    assert (updated.credential_hash, updated.credential_expires_at) == ("new", 90.0)
    assert replace(updated, credential_hash="old", credential_expires_at=None) == held
    assert [(e.kind, e.message, e.data) for e in change.events] == [
        ("credential", "w1 rotated its credential", {"expires_at": 90.0})]
    assert (change.kick, list(change.wake), change.token_use) == (False, [], None)
