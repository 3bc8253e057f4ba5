"""Outputs and join material through the pure domain: what the first manager produces reaches
later items, per-joiner material is minted, handed to its joiner alone, re-minted once
expired, and revoked once used, with the reports that drive it folded as the coordinator folds
them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.assignments.assignment import (
    AssignmentInputs,
    build_assignment,
    waits_notices,
)
from coordinator.domain.assignments.minting import mint_pass
from coordinator.domain.assignments.reports import fold_report
from coordinator.domain.errors import Conflict
from coordinator.domain.model import ClusterSpec, Machine, MachineState, deployed_managers
from coordinator.domain.records import StoredCluster
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.rollout.planner import plan
from coordinator.domain.specs.outputs import waits_text
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.fleet import parse_fleet
from coordinator.domain.views.rendering import render_cluster, render_machine
from nodeagent.wire.protocol import Assignment, ItemReport
from nodeagent.wire.validation import InvalidDocument, load_model
from tests.support.builders import MINTING_CLUSTER, decided, machine

S = MachineState

SPEC = MINTING_CLUSTER


@pytest.fixture
def spec() -> Any:
    return load_spec(SPEC)


def first(spec: Any) -> Machine:
    """The first manager, Ready, having produced the init outputs."""
    return replace(machine("m1", "manager", state=S.READY), deploy_order=1, release="1",
                   outputs={"init.caCertHash": "sha256:abcdef0123", "init.endpoint": "10.0.0.1:6443"})


def assignment(spec: Any, m: Machine, peers: list[Machine]) -> Assignment:
    stored = StoredCluster(spec, 1, 0.0, 0.0)
    return build_assignment(AssignmentInputs(stored, m, [p for p in peers if p.role == "manager"]),
                            None)


def report(spec: Any, m: Machine, item_name: str, outputs: dict[str, str] | None,
           peers: list[Machine]) -> Machine:
    """The agent of m ran the item of its assignment named item_name, and it succeeded."""
    (item,) = [i for i in assignment(spec, m, peers).items if i.name == item_name]
    sent = ItemReport(item=item.name, fingerprint=item.fingerprint(), phase=item.phase,
                      status="succeeded", attempt=1, started_at=1.0, finished_at=2.0,
                      exit_code=0, outputs=outputs)
    return decided(fold_report(spec, (), m, sent, 3.0)).machine


def settle(spec: Any, machines: list[Machine], now: float) -> list[Machine]:
    """A reconcile pass's part in it: jobs, material, and waits."""
    by_id = {m.id: m for m in machines}
    for changed in mint_pass(spec, list(by_id.values()), now).machines:
        by_id[changed.id] = changed
    for changed in waits_notices(spec, list(by_id.values()), None):
        by_id[changed.id] = changed
    return [by_id[m.id] for m in machines]


def test_a_joiner_waits_for_its_material_gets_its_own_and_has_it_revoked_once_used(spec: Any) -> None:
    m1, w1 = first(spec), machine("w1", state=S.DEPLOY)
    m1, w1 = settle(spec, [m1, w1], now=10.0)
    assert assignment(spec, w1, [m1, w1]).items == []  # waits for its token
    assert "being minted on m1" in waits_text(spec, w1, [m1, w1])
    assert m1.minting is not None and m1.minting.items == ("token",)  # a worker gets no certkey
    job = assignment(spec, m1, [m1, w1])
    assert job.phase == "mint" and job.values["joiner.hostname"] == "w1"
    assert job.values["mint.lifetimeSeconds"] == "60"

    m1 = report(spec, m1, "token", {"token": "abcdef.0123456789abcdef"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    handed = assignment(spec, w1, [m1, w1])
    assert [i.name for i in handed.items] == ["join"]
    assert handed.values["outputs.token.token"] == "abcdef.0123456789abcdef"
    assert "outputs.token.token" in handed.secrets and "outputs.init.caCertHash" in handed.secrets
    assert "outputs.init.endpoint" not in handed.secrets  # declared secret: false
    assert "outputs.certkey.key" not in handed.values
    assert m1.minting is None and assignment(spec, m1, [m1, w1]).phase is None

    w1 = report(spec, w1, "join", None, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=12.0)
    assert m1.minting is not None and m1.minting.kind == "revoke"
    revoke = assignment(spec, m1, [m1, w1])
    assert revoke.phase == "revoke" and revoke.values["outputs.token.token"].startswith("abcdef.")
    m1 = report(spec, m1, "forget-token", None, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=13.0)
    assert w1.material is not None and w1.material.revoked_at == 13.0
    assert w1.material.values == {} and m1.minting is None


def test_material_that_expired_unused_is_minted_again_with_the_next_serial(spec: Any) -> None:
    m1, w1 = settle(spec, [first(spec), machine("w1", state=S.DEPLOY)], now=10.0)
    m1 = report(spec, m1, "token", {"token": "aaaaaa.aaaaaaaaaaaaaaaa"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    generation = w1.generation
    m1, w1 = settle(spec, [m1, w1], now=11.0 + 60)
    assert w1.material is not None and w1.material.serial == 2 and not w1.material.minted
    assert w1.generation > generation  # its agent stops using the expired token
    assert assignment(spec, w1, [m1, w1]).items == []
    m1 = report(spec, m1, "token", {"token": "bbbbbb.bbbbbbbbbbbbbbbb"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=72.0)
    assert assignment(spec, w1, [m1, w1]).values["outputs.token.token"].startswith("bbbbbb.")


def test_a_joining_manager_gets_a_certificate_key_and_the_first_manager_none(spec: Any) -> None:
    m1 = first(spec)
    m2 = replace(machine("m2", "manager", state=S.DEPLOY), deploy_order=2)
    m1, m2 = settle(spec, [m1, m2], now=10.0)
    assert m1.minting is not None and m1.minting.items == ("token", "certkey")
    alone = replace(machine("m0", "manager", state=S.DEPLOY), deploy_order=1)
    assert [i.name for i in assignment(spec, alone, [alone]).items] == ["init"]
    (alone,) = settle(spec, [alone], now=10.0)
    assert alone.material is None and alone.waits == ()


def test_an_item_whose_outputs_are_missing_waits_and_says_on_which_machine(spec: Any) -> None:
    m1 = replace(first(spec), outputs={}, state=S.DEPLOY)
    w1 = machine("w1", state=S.DEPLOY)
    m1, w1 = settle(spec, [m1, w1], now=10.0)
    assert "outputs.init.endpoint" in w1.waits
    assert "from item init (not run yet; managers: m1 (Deploy))" in waits_text(spec, w1, [m1, w1])
    m1 = replace(m1, outputs=first(spec).outputs, state=S.READY)
    before = w1.generation
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    assert w1.waits == () or "outputs.token.token" in w1.waits
    assert w1.generation > before


def test_a_report_without_its_declared_outputs_is_refused(spec: Any) -> None:
    m1 = replace(first(spec), outputs={}, state=S.DEPLOY)
    with pytest.raises(Conflict, match="declares caCertHash, endpoint; its report carries none"):
        report(spec, m1, "init", None, [m1])


@pytest.mark.parametrize(("wrong", "message"), [
    ("${outputs.init.caCertHsh}", "unknown output ${outputs.init.caCertHsh}; did you mean "
                                  "${outputs.init.caCertHash}?"),
    ("${outputs.nope.caCertHash}", "unknown output ${outputs.nope.caCertHash}"),
])
def test_apply_refuses_a_reference_to_an_unknown_item_or_output_naming_its_line(
        wrong: str, message: str) -> None:
    with pytest.raises(InvalidDocument) as caught:
        load_spec(SPEC.replace("${outputs.init.caCertHash}", wrong))
    assert message in str(caught.value)
    assert str(caught.value).startswith("line 32: machineTypes.worker[0].action.argv[6]")


@pytest.mark.parametrize(("fragment", "message"), [
    ("    - name: early\n      phase: prepare\n      action: {type: exec, argv: [a, "
     "\"${outputs.init.caCertHash}\"]}\n",
     "prepare items run before any manager deployed"),
    ("    - name: early\n      phase: reset\n      action: {type: exec, argv: [a, "
     "\"${outputs.token.token}\"]}\n", "is join material (mint item token)"),
    ("    - name: early\n      phase: prepare\n      when: {firstManager: false}\n      action: "
     "{type: exec, argv: [a]}\n", "only managers can be the first manager"),
    ("    - name: early\n      phase: mint\n      action: {type: exec, argv: [a]}\n",
     "mint items run on a Ready manager"),
    ("    - name: early\n      phase: deploy\n      outputs: [{name: x}]\n      action: "
     "{type: exec, argv: [a]}\n", "only manager items produce outputs"),
    ("    - name: early\n      phase: deploy\n      action: {type: exec, argv: [a, "
     "\"${joiner.ip}\"]}\n", "known to mint, revoke and leave items only"),
])
def test_apply_refuses_outputs_and_conditions_that_cannot_hold(fragment: str, message: str) -> None:
    text = SPEC + fragment
    with pytest.raises(InvalidDocument) as caught:
        load_spec(text)
    assert message in str(caught.value)
    assert "machineTypes.worker[1]" in str(caught.value)


def test_the_coordinator_masks_what_it_knows_of_a_machine_in_its_reports(spec: Any) -> None:
    m1, w1 = settle(spec, [first(spec), machine("w1", state=S.DEPLOY)], now=10.0)
    m1 = report(spec, m1, "token", {"token": "plainvalue42xyz"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    (item,) = assignment(spec, w1, [m1, w1]).items
    sent = ItemReport(item=item.name, fingerprint=item.fingerprint(), phase=item.phase,
                      status="failed", attempt=1, started_at=1.0, finished_at=2.0, exit_code=1,
                      output="joining with plainvalue42xyz\n", error="exit 1")
    folded = decided(fold_report(spec, (), w1, sent, 12.0))
    assert "plainvalue42xyz" not in json.dumps([e.data for e in folded.events])


def test_render_names_secrets_and_what_is_not_produced_yet_never_a_secret_value(spec: Any) -> None:
    m1, w1 = settle(spec, [first(spec), machine("w1", state=S.DEPLOY)], now=10.0)
    m1 = report(spec, m1, "token", {"token": "plainvalue42xyz"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    shown = repr(render_machine(spec, w1, [m1, w1], stored=spec))
    assert "[secret ${outputs.token.token}]" in shown and "plainvalue42xyz" not in shown
    assert "[secret ${outputs.init.caCertHash}]" in shown and "abcdef0123" not in shown
    assert "10.0.0.1:6443" in shown  # declared secret: false
    fleet = repr(render_cluster(spec, [], fleet=parse_fleet("1,1")))
    assert "<${outputs.init.caCertHash}: not produced yet>" in fleet


# The spec a read-only token may send to be rendered (a stored spec may hold it too, from before
# the checks): every output public, the mint item's included, and then redeclared as a deploy
# item's, whose outputs may be public (load_model: the whole-spec checks refuse it).
EVERY_OUTPUT_PUBLIC = SPEC.replace("{name: caCertHash}", "{name: caCertHash, secret: false}") \
    .replace("outputs: [{name: token}]", "outputs: [{name: token, secret: false}]")
REDECLARED = EVERY_OUTPUT_PUBLIC.replace("phase: mint\n      lifetimeSeconds: 60", "phase: deploy")


def test_join_material_is_secret_whatever_its_item_says(spec: Any) -> None:
    with pytest.raises(InvalidDocument) as caught:
        load_spec(EVERY_OUTPUT_PUBLIC)
    assert str(caught.value) == (
        "line 14: machineTypes.manager[1].outputs[0].secret: join material "
        "is always secret (it joins a machine to the cluster): drop `secret: false`")
    stored = load_model(ClusterSpec, EVERY_OUTPUT_PUBLIC)  # stored before the check
    m1, w1 = settle(stored, [first(stored), machine("w1", state=S.DEPLOY)], now=10.0)
    m1 = report(stored, m1, "token", {"token": "plainvalue42xyz"}, [m1, w1])
    m1, w1 = settle(stored, [m1, w1], now=11.0)
    assert "outputs.token.token" in assignment(stored, w1, [m1, w1]).secrets  # its agent masks it
    assert "plainvalue42xyz" not in repr(render_machine(stored, w1, [m1, w1], stored=stored))


def test_what_is_stored_decides_what_a_rendering_hides_not_the_spec_rendered(spec: Any) -> None:
    m1, w1 = settle(spec, [first(spec), machine("w1", state=S.DEPLOY)], now=10.0)
    m1 = report(spec, m1, "token", {"token": "plainvalue42xyz"}, [m1, w1])
    m1, w1 = settle(spec, [m1, w1], now=11.0)
    for sent in (EVERY_OUTPUT_PUBLIC, REDECLARED):
        hostile = load_model(ClusterSpec, sent)
        shown = repr(render_machine(hostile, w1, [m1, w1], stored=spec))
        assert "plainvalue42xyz" not in shown and "abcdef0123" not in shown
        assert "[secret ${outputs.token.token}]" in shown
        assert "10.0.0.1:6443" in shown  # public in both
        assert "10.0.0.1:6443" not in repr(render_machine(hostile, w1, [m1, w1]))  # none stored
        # join material, even where the stored spec itself names it otherwise
        assert "plainvalue42xyz" not in repr(render_machine(hostile, w1, [m1, w1], stored=hostile))


def test_items_run_only_on_machines_whose_labels_match() -> None:
    labelled = load_spec(SPEC.replace('''  worker:
''', '''  worker:
    - name: gpu-driver
      phase: deploy
      when: {labels: {gpu: nvidia}}
      action: {type: exec, argv: [install-driver]}
'''))
    m1 = first(labelled)
    plain = replace(machine("w1", state=S.DEPLOY), material=None)
    gpu = replace(machine("w2", state=S.DEPLOY), labels={"gpu": "nvidia"})
    managers = deployed_managers([m1])
    assert [i.name for i, _ in phase_run(labelled, plain, "deploy", managers)] == ["join"]
    assert [i.name for i, _ in phase_run(labelled, gpu, "deploy", managers)] == ["gpu-driver",
                                                                                  "join"]
    # The planner waits for the items that apply: the plain worker is done without the driver.
    done = replace(plain, applied=frozenset(i.fingerprint()
                                            for i, _ in phase_run(labelled, plain, "deploy",
                                                                  managers)))
    assert [d.to_state for d in plan(labelled, [m1, done]) if d.machine_id == done.id] == [S.READY]


def test_a_job_whose_manager_stops_answering_moves_to_one_other_manager(spec: Any) -> None:
    m1 = first(spec)
    m2 = replace(machine("m2", "manager", state=S.READY), deploy_order=2, release="1")
    m3 = replace(machine("m3", "manager", state=S.READY), deploy_order=3, release="1")
    w1 = machine("w1", state=S.DEPLOY)
    m1, m2, m3, w1 = settle(spec, [m1, m2, m3, w1], now=10.0)
    assert m1.minting is not None and m2.minting is None
    m1, m2, m3, w1 = settle(spec, [replace(m1, responding=False), m2, m3, w1], now=11.0)
    assert m1.minting is None
    assert [m.hostname for m in (m2, m3) if m.minting is not None] == ["m2"]
    assert w1.material is not None and w1.material.minter == m2.id


def test_a_job_whose_items_left_the_spec_is_dropped_not_run_forever(spec: Any) -> None:
    m1, w1 = settle(spec, [first(spec), machine("w1", state=S.DEPLOY)], now=10.0)
    renamed = load_spec(SPEC.replace("- name: token\n", "- name: bootstrap\n")
                        .replace("outputs.token.token", "outputs.bootstrap.token"))
    m1, w1 = settle(renamed, [m1, w1], now=11.0)
    assert m1.minting is None or m1.minting.items == ("bootstrap",)
    m1, w1 = settle(renamed, [m1, w1], now=12.0)
    assert m1.minting is not None and m1.minting.items == ("bootstrap",)


# Who mints a joiner's material in a reconcile pass (mint_pass), as a table: the managers as
# they stand, the machine that joins, and the manager given the mint job with its items (None:
# no job now, the joiner waits).
M1 = first(load_spec(SPEC))
M2 = replace(machine("m2", "manager", state=S.READY), deploy_order=2, release="1")
W1 = machine("w1", state=S.DEPLOY)
MINTS = [
    pytest.param([M1], W1, ("m1", ("token",)), id="a worker joining: a token, from m1"),
    pytest.param([M1], replace(machine("m3", "manager", state=S.DEPLOY), deploy_order=3),
                 ("m1", ("token", "certkey")), id="a manager joining: a token and a cert key"),
    pytest.param([replace(M1, responding=False)], W1, None,
                 id="no manager answers: the joiner waits"),
    pytest.param([replace(M1, responding=False), M2], W1, ("m2", ("token",)),
                 id="the first manager silent: another Ready one mints"),
    pytest.param([replace(M1, state=S.UPGRADE)], W1, None,
                 id="a manager upgrading runs no job: the joiner waits"),
    pytest.param([M1], machine("w1", state=S.PREPARE), None,
                 id="a machine still preparing needs no material yet"),
    pytest.param([], replace(machine("m0", "manager", state=S.DEPLOY), deploy_order=1), None,
                 id="the first manager's init needs none"),
]


@pytest.mark.parametrize(("managers", "joiner", "minted"), MINTS)
def test_mint_pass_table(managers: list[Machine], joiner: Machine,
                         minted: tuple[str, tuple[str, ...]] | None) -> None:
    changed = mint_pass(load_spec(SPEC), [*managers, joiner], now=10.0).machines
    jobs = [(m.hostname, m.minting.items) for m in changed
            if m.minting is not None and m.minting.joiner == joiner.id]
    assert jobs == ([minted] if minted else [])
