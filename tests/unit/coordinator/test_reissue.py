"""A reissue token names the machine it is bound to, binds it only to a node of its hostname,
and is blanked wherever a log or an item's output would show it, as every other token of this
project is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Forbidden, Unauthorized
from coordinator.domain.machines.registration import Credential
from coordinator.domain.machines.reissue import reissue, rejoin_refusal, rejoined, revocation
from coordinator.domain.machines.tokens import new_reissue_token, token_hash
from coordinator.domain.model import Machine, MachineState
from nodeagent.wire.joinstring import reissued_machine
from nodeagent.wire.protocol import PrecheckReport, RegisterRequest
from nodeagent.wire.redact import MASK, redact
from tests.support.builders import machine, precheck_report


def test_a_reissue_token_names_its_machine_and_no_other_token_does() -> None:
    token = new_reissue_token("3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11")
    assert reissued_machine(token) == "3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11"
    assert reissued_machine("join_" + token[7:]) is None
    assert reissued_machine("rejoin_") is None and reissued_machine("rejoin_x_") is None


def test_a_reissue_token_is_redacted_whole() -> None:
    token = new_reissue_token("3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11")
    assert redact(f"registering with {token} now") == f"registering with {MASK} now"


def test_a_reissue_string_binds_the_machine_whatever_case_its_node_spells_its_name_in() -> None:
    """Kubernetes compares node names lowercased: W1 is w1's node, w2 is another."""
    bound = replace(machine("w1", state=MachineState.READY), reissue_hash=token_hash("r"),
                    reissue_expires_at=100.0)
    assert rejoin_refusal(bound, token_hash("r"), "W1", 10.0) is None
    refused = rejoin_refusal(bound, token_hash("r"), "w2", 10.0)
    assert isinstance(refused, Forbidden) and "this node is w2" in str(refused)


@pytest.mark.parametrize(("before", "credential"), [
    ({"credential_hash": "held", "credential_expires_at": 99.0}, "held"),  # lost: revoked
    ({"credential_hash": "", "reissue_hash": "older", "reissue_used_at": 3.0}, ""),  # replaced
])
def test_a_reissue_is_one_change_revoking_the_credential_and_waking_its_agent(
        before: dict[str, object], credential: str) -> None:
    held = replace(machine("w1", state=MachineState.READY), **before)  # type: ignore[arg-type]
    assert held.credential_hash == credential
    change = reissue(held, "new-hash", 70.0, 10.0)
    (updated,) = change.machines
    assert (updated.credential_hash, updated.credential_expires_at) == ("", None)
    assert (updated.reissue_hash, updated.reissue_expires_at, updated.reissue_used_at) == (
        "new-hash", 70.0, None)
    assert [(e.kind, e.machine, e.data) for e in change.events] == [
        ("reissued", held.id, {"expires_at": 70.0})]
    assert list(change.wake) == [held.id] and not change.kick and not change.removed


# A registration with a reissue string, as a table: what became of the string bound to w1
# (valid until 100) and the node that registers with it, and what it is told. "" means the
# new credential is bound to w1's record.
BOUND = replace(machine("w1", state=MachineState.READY), reissue_hash=token_hash("r"),
                reissue_expires_at=100.0)
REJOINS = [
    pytest.param(BOUND, "r", "w1", 10.0, None, "", id="its own node in time: rejoined"),
    pytest.param(BOUND, "r", "W1", 10.0, None, "", id="its node spelling the name otherwise"),
    pytest.param(BOUND, "old", "w1", 10.0, Unauthorized, "was replaced by a newer one",
                 id="a string replaced by a newer reissue"),
    pytest.param(replace(BOUND, reissue_used_at=20.0), "r", "w1", 30.0, Unauthorized,
                 "binds one credential only", id="a string used once already"),
    pytest.param(BOUND, "r", "w1", 100.0, Unauthorized, "expired at",
                 id="a string past its expiry"),
    pytest.param(BOUND, "r", "w2", 10.0, Forbidden, "this node is w2",
                 id="another node with w1's string"),
]


@pytest.mark.parametrize(("bound", "token", "hostname", "now", "kind", "told"), REJOINS)
def test_rejoin_refusal_table(bound: Machine, token: str, hostname: str, now: float,
                              kind: type[Exception] | None, told: str) -> None:
    refused = rejoin_refusal(bound, token_hash(token), hostname, now)
    if kind is None:
        assert refused is None
    else:
        assert type(refused) is kind and told in str(refused), refused
        if kind is Unauthorized:
            assert "coordinator machines reissue w1" in str(refused), "the way out is named"


@pytest.mark.parametrize("state", [MachineState.PENDING, MachineState.READY,
                                   MachineState.DELETING])
def test_a_revoked_credential_is_one_change_that_wakes_its_agent(state: MachineState) -> None:
    """`machines revoke`: the machine keeps its record, with no credential left (whatever its
    state), its event, its agent woken; no pass asked for (nothing to plan)."""
    held = replace(machine("w1", state=state), credential_hash=token_hash("c"),
                   credential_expires_at=50.0)
    change = revocation(held, 10.0)
    [revoked] = change.machines
    assert (revoked.credential_hash, revoked.credential_expires_at) == ("", None)
    assert replace(revoked, credential_hash=held.credential_hash, credential_expires_at=50.0) \
        == held
    assert [(e.kind, e.message, e.time) for e in change.events] == [
        ("credential", "w1: credential revoked", 10.0)]
    assert (list(change.wake), change.kick, change.removed) == ([held.id], False, {})


@pytest.mark.parametrize("state", [MachineState.PENDING, MachineState.READY])
def test_a_rejoin_is_one_change_binding_the_new_credential_without_a_join_tokens_use(
        state: MachineState) -> None:
    """The machine's own record (id, state, items) with the new credential and the string used
    up, its event and a pass asked for; no join token counted: the string is the machine's."""
    bound = replace(BOUND, state=state)
    sent = RegisterRequest(join_token="r", hostname="w1", ip="10.0.0.7",
                           precheck=PrecheckReport.model_validate(precheck_report("w1")))
    change = rejoined(bound, sent, Credential("new", 90.0), 10.0)
    [updated] = change.machines
    assert (updated.id, updated.state, updated.credential_hash, updated.reissue_used_at,
            updated.generation) == (bound.id, state, "new", 10.0, bound.generation + 1)
    assert [(e.kind, e.message) for e in change.events] == [
        ("rejoined", f"w1 rejoined from 10.0.0.7 with its reissue string: a new credential "
                     f"bound to its record ({state.value}, items and history kept)")]
    assert (change.kick, list(change.wake), change.token_use) == (True, [], None)
