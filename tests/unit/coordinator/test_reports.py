"""Folding item reports into machines, without a store: what a report may carry and change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.assignments.reports import fold_report
from coordinator.domain.errors import Conflict
from coordinator.domain.model import DrainStage, DrainStatus, MachineState
from nodeagent.wire.protocol import ItemReport, StateItem
from tests.support.builders import change_or_refusal, cluster, decided, item, items, machine

KUBECONFIG = ("apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
              "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n")


def report(of: StateItem, status: str = "succeeded", attempt: int = 1, **fields: object) -> ItemReport:
    return ItemReport(item=of.name, fingerprint=of.fingerprint(), phase=of.phase, status=status,
                      attempt=attempt, started_at=1.0, **fields)


def test_a_success_marks_the_item_applied_and_says_so_in_one_event() -> None:
    spec = cluster(worker=items("prepare", 2))
    w1 = machine("w1", state=MachineState.PREPARE)
    first = spec.machine_types.worker[0]
    folded = decided(fold_report(spec, (), w1, report(first), now=50.0))
    assert folded.machine.applied == {first.fingerprint()}
    assert folded.machine.progress is not None and folded.machine.progress.status == "succeeded"
    assert folded.machine.last_seen == 50.0
    assert [e.message for e in folded.events] == ["prepare item prepare-0 succeeded (attempt 1)"]


def test_failing_since_holds_across_retries_and_clears_on_success() -> None:
    spec = cluster(worker=items("prepare", 1))
    of, known = spec.machine_types.worker[0], ()
    w1 = machine("w1", state=MachineState.PREPARE)
    w1 = decided(fold_report(spec, known, w1, report(of, "failed", error="exit 1"), now=10.0)).machine
    w1 = decided(fold_report(spec, known, w1, report(of, "running", attempt=2), now=20.0)).machine
    w1 = decided(fold_report(spec, known, w1, report(of, "failed", attempt=2, error="exit 1"),
                             now=30.0)).machine
    assert w1.progress is not None and w1.progress.failing_since == 10.0
    w1 = decided(fold_report(spec, known, w1, report(of, attempt=3), now=40.0)).machine
    assert w1.progress is not None and w1.progress.failing_since is None


def test_an_item_the_spec_does_not_have_is_refused() -> None:
    spec = cluster(worker=items("prepare", 1))
    stranger = item("not-in-spec", "prepare")
    with pytest.raises(Conflict, match="not-in-spec"):
        fold_report(spec, (), machine("w1"), report(stranger), now=1.0)


def test_only_the_items_of_the_machines_current_assignment_are_accepted() -> None:
    """An unapproved machine, another phase's item, another role's, or a known fingerprint
    under another (4 MiB) name: each would be stored and shown; each is refused."""
    spec = cluster(manager=items("deploy", 1), worker=[*items("prepare", 1), *items("deploy", 1)])
    prepare, deploy = spec.machine_types.worker
    w1 = machine("w1", state=MachineState.PREPARE)
    assert decided(fold_report(spec, (), w1, report(prepare), now=1.0)).machine.applied
    refused = [(replace(w1, approved=False), report(prepare)),
               (w1, report(deploy)),
               (w1, report(spec.machine_types.manager[0])),
               (w1, report(prepare).model_copy(update={"item": "x" * 4_000_000}))]
    for sender, sent in refused:
        with pytest.raises(Conflict, match="not an item of the current assignment of w1"):
            fold_report(spec, (), sender, sent, now=1.0)


def test_only_a_managers_kubeconfig_item_may_carry_a_kubeconfig_and_it_is_never_in_an_event() -> None:
    source = StateItem.model_validate({"name": "init", "phase": "deploy", "kubeconfigFrom": "/k",
                                       "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[source])
    known = ()
    m1 = machine("m1", "manager", state=MachineState.DEPLOY)
    folded = decided(fold_report(spec, known, m1, report(source, kubeconfig=KUBECONFIG), now=1.0))
    assert folded.machine.kubeconfig == KUBECONFIG
    assert all("127.0.0.1:6443" not in e.message and "127.0.0.1:6443" not in str(e.data)
               for e in folded.events)
    with pytest.raises(Conflict, match="not an item of the current assignment of w1"):
        fold_report(spec, known, machine("w1", state=MachineState.DEPLOY),
                    report(source, kubeconfig=KUBECONFIG), now=1.0)


def test_an_unusable_kubeconfig_is_kept_out_and_the_event_says_why() -> None:
    source = StateItem.model_validate({"name": "init", "phase": "deploy", "kubeconfigFrom": "/k",
                                       "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[source])
    m1 = replace(machine("m1", "manager", state=MachineState.DEPLOY), kubeconfig=KUBECONFIG)
    folded = decided(fold_report(spec, (), m1,
                                 report(source, kubeconfig="clusters: []"), now=1.0))
    assert folded.machine.kubeconfig == KUBECONFIG
    assert any("not usable" in e.message for e in folded.events)


def test_a_kubeconfig_comes_with_its_item_only_while_the_machines_state_runs_it() -> None:
    """An upgrade that runs the changed kubeconfigFrom item again takes its new kubeconfig; a
    Ready manager, or one preparing, cannot send one for it."""
    source = StateItem.model_validate({"name": "init", "phase": "deploy", "kubeconfigFrom": "/k",
                                       "version": "2", "action": {"type": "exec", "argv": ["true"]}})
    spec = cluster(manager=[source]).model_copy(update={"release": "2"})
    sent = report(source, kubeconfig=KUBECONFIG)
    upgrading = replace(machine("m1", "manager", state=MachineState.UPGRADE, release="1"),
                        drain=DrainStatus(DrainStage.DRAINED, started_at=0.0))
    assert decided(fold_report(spec, (), upgrading, sent, now=1.0)).machine.kubeconfig == KUBECONFIG
    with pytest.raises(Conflict, match="not in the current assignment"):  # not drained yet
        fold_report(spec, (), replace(upgrading, drain=None), sent, now=1.0)
    for state in (MachineState.READY, MachineState.PREPARE):
        with pytest.raises(Conflict, match=f"current assignment of m1 \\({state}\\)"):
            fold_report(spec, (), machine("m1", "manager", state=state, release="2"), sent,
                        now=1.0)


# An item report folded into w1 (fold_report), as a table: w1's state and approval, the item
# the report names and its status, and the outcome: the item applied or not, with the event
# that says so, or the report refused (it would be stored and shown).
TABLE_SPEC = cluster(manager=items("deploy", 1), worker=[*items("prepare", 1),
                                                        *items("deploy", 1)])
PREPARE, DEPLOY = TABLE_SPEC.machine_types.worker
MANAGERS = TABLE_SPEC.machine_types.manager[0]
S = MachineState
FOLDS = [
    pytest.param(S.PREPARE, True, PREPARE, "succeeded", (True, "prepare item prepare-0 "
                 "succeeded (attempt 1)"), id="a prepare item succeeded: applied"),
    pytest.param(S.PREPARE, True, PREPARE, "failed", (False, "prepare item prepare-0 failed "
                 "(attempt 1)"), id="a prepare item failed: not applied, said so"),
    pytest.param(S.PREPARE, True, PREPARE, "running", (False, "prepare item prepare-0 "
                 "running (attempt 1)"), id="a prepare item running: not applied yet"),
    pytest.param(S.DEPLOY, True, DEPLOY, "succeeded", (True, "deploy item deploy-0 "
                 "succeeded (attempt 1)"), id="a deploy item in Deploy: applied"),
    pytest.param(S.PREPARE, True, DEPLOY, "succeeded", "(Prepare)",
                 id="a deploy item in Prepare: refused"),
    pytest.param(S.PREPARE, False, PREPARE, "succeeded", "(Prepare, not approved)",
                 id="from a machine not approved: refused"),
    pytest.param(S.PREPARE, True, MANAGERS, "succeeded", "(Prepare)",
                 id="another role's item: refused"),
]


@pytest.mark.parametrize(("state", "approved", "of", "status", "outcome"), FOLDS)
def test_fold_report_table(state: MachineState, approved: bool, of: StateItem, status: str,
                           outcome: tuple[bool, str] | str) -> None:
    w1 = replace(machine("w1", state=state), approved=approved)
    sent = report(of, status, error="exit 1" if status == "failed" else "")
    if isinstance(outcome, str):
        with pytest.raises(Conflict) as refused:
            fold_report(TABLE_SPEC, (), w1, sent, now=5.0)
        assert str(refused.value).endswith(f"not an item of the current assignment of w1 "
                                           f"{outcome}")
        return
    folded = decided(fold_report(TABLE_SPEC, (), w1, sent, now=5.0))
    applied, said = outcome
    assert (of.fingerprint() in folded.machine.applied) is applied
    assert folded.events[0].message.startswith(said), folded.events[0].message
    assert folded.machine.progress is not None and folded.machine.progress.status == status


# A report decided whole, as a table: its status, and the one change it makes (a pass asked
# for only when the item succeeded, so the machine may move on); one that does not fit is
# refused and decides nothing.
@pytest.mark.parametrize(("status", "named", "applied", "kick"), [
    ("succeeded", "prepare-0", True, True),
    ("running", "prepare-0", False, False),
    ("failed", "prepare-0", False, False),
    ("succeeded", "not-in-spec", False, False),
], ids=["succeeded", "running", "failed", "unknown-item"])
def test_a_report_is_one_change_of_its_machine(status: str, named: str, applied: bool,
                                               kick: bool) -> None:
    spec = cluster(worker=items("prepare", 1))
    w1 = machine("w1", state=MachineState.PREPARE)
    of = spec.machine_types.worker[0] if named == "prepare-0" else item(named, "prepare")
    sent = report(of, status, **({"error": "exit 1"} if status == "failed" else {}))
    change = change_or_refusal(lambda: fold_report(spec, (), w1, sent, now=9.0),
                               None if named == "prepare-0" else named)
    if change is None:
        return
    [updated] = change.machines
    assert (of.fingerprint() in updated.applied, updated.last_seen) == (applied, 9.0)
    assert [e.kind for e in change.events] == ["item"]
    assert (change.kick, list(change.wake), change.token_use) == (kick, [], None)
