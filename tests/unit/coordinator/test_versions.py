"""The Kubernetes version rules of `cluster apply` and `upgrade plan` (domain/releases/versions.py): a
version change needs a new release, goes one minor at a time from the oldest version the
cluster runs (an unfinished upgrade's machines counted), and never down unless forced, and
then one minor at most; refusals name settings.kubernetes.version and the allowed versions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.model import ClusterSpec, DrainStage, Machine, MachineState
from coordinator.domain.releases.releases import to_run
from coordinator.domain.releases.versions import (
    FIELD,
    admitted,
    allowed,
    join_wait,
    judge,
    parse,
    running,
    warnings,
)
from coordinator.domain.rollout.planner import plan_to_fixpoint
from nodeagent.wire.protocol import StateItem
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import cluster, drained, finish_phase, item, machine

S = MachineState


def spec(version: str | None, release: str | None = None) -> ClusterSpec:
    return cluster([item("packages", "prepare")], [item("packages", "prepare")],
                   release=release or version or "r1", kubernetes={"version": version})


def deployed(hostname: str, version: str, role: str = "worker",
             state: MachineState = S.READY) -> Machine:
    return replace(machine(hostname, role, state=state), kubernetes=version)  # type: ignore[arg-type]


FLEET = [deployed("m1", "1.33.4", "manager"), deployed("w1", "1.33.4")]


def test_versions_order_as_semantic_versions_a_prerelease_before_its_release() -> None:
    ordered = sorted(parse(v) for v in ("1.34.0", "1.33.10", "1.34.0-rc.1", "1.33.9"))  # type: ignore[type-var]
    assert [v.text for v in ordered] == ["1.33.9", "1.33.10", "1.34.0-rc.1", "1.34.0"]  # type: ignore[union-attr]
    assert parse("v1.33.4") == parse("1.33.4")
    assert parse("1.33") is None


def test_a_first_apply_takes_any_version() -> None:
    assert judge(None, spec("1.35.0"), []) .problem is None


def test_one_minor_up_and_patches_are_accepted() -> None:
    for target in ("1.33.5", "1.34.0", "1.34.9"):
        assert judge(spec("1.33.4"), spec(target), FLEET).problem is None, target


def test_a_skipped_minor_is_refused_naming_the_allowed_versions() -> None:
    problem = judge(spec("1.33.4"), spec("1.35.0"), FLEET).problem
    assert problem is not None
    assert "1.35.0 skips a minor" in problem
    assert "1.33.4 (the stored spec, m1, w1)" in problem
    assert problem.endswith("allowed: 1.33.x from 1.33.4, or 1.34.x")


def test_an_unfinished_upgrade_counts_the_machines_left_behind() -> None:
    """The spec is at 1.34.1 but w1 still runs 1.33.4: 1.35 would put it two minors behind
    a control plane kubeadm upgraded again, so only 1.34 patches are allowed."""
    fleet = [deployed("m1", "1.34.1", "manager"), deployed("w1", "1.33.4")]
    problem = judge(spec("1.34.1"), spec("1.35.0"), fleet).problem
    assert problem is not None and "1.33.4 (w1)" in problem
    assert problem.endswith("allowed: 1.34.x from 1.34.1")
    assert judge(spec("1.34.1"), spec("1.34.2"), fleet).problem is None


def test_a_downgrade_is_refused_unless_forced_and_then_one_minor_at_most() -> None:
    problem = judge(spec("1.34.1"), spec("1.34.0"), [deployed("w1", "1.34.1")]).problem
    assert problem is not None and "1.34.0 is a downgrade" in problem
    assert "allowed: 1.34.x from 1.34.1, or 1.35.x" in problem and "--allow-downgrade" in problem
    forced = judge(spec("1.34.1"), spec("1.33.7"), [deployed("w1", "1.34.1")], force=True)
    assert forced.problem is None and forced.downgrade
    too_far = judge(spec("1.34.1"), spec("1.32.0"), [deployed("w1", "1.34.1")], force=True)
    assert too_far.problem is not None and "allowed: 1.33.x to 1.35.x" in too_far.problem


def test_a_machine_still_at_a_newer_version_makes_a_lower_one_a_downgrade() -> None:
    """After a forced downgrade to 1.34.0, w1 not yet brought down: 1.34.0 again (a new
    release) is still a downgrade for w1."""
    fleet = [deployed("m1", "1.34.0", "manager"), deployed("w1", "1.34.1")]
    problem = judge(spec("1.34.0", "r1"), spec("1.34.0-rc.1", "r2"), fleet).problem
    assert problem is not None and "1.34.1 (w1)" in problem


def test_a_version_change_without_a_new_release_is_refused() -> None:
    problem = judge(spec("1.33.4", "r1"), spec("1.34.0", "r1"), FLEET).problem
    assert problem is not None
    assert "with release still 'r1'" in problem and "new release" in problem


def test_before_any_machine_is_approved_any_version_goes() -> None:
    pending = [machine("w1")]
    assert running(spec("1.33.4"), pending) is None
    assert judge(spec("1.33.4"), spec("1.36.0"), pending).problem is None


def test_machines_in_prepare_count_at_the_stored_version_and_leaving_ones_not_at_all() -> None:
    fleet = [machine("w1", state=S.PREPARE), deployed("w2", "1.32.0", state=S.DELETING)]
    now = running(spec("1.33.4"), fleet)
    assert now is not None and now.shown() == "1.33.4 (the stored spec, w1)"


def test_an_unchanged_version_and_a_spec_without_one_are_not_judged() -> None:
    fleet = [deployed("w1", "1.31.0")]
    assert judge(spec("1.33.4", "r1"), spec("1.33.4", "r2"), fleet).problem is None
    assert judge(spec("1.33.4", "r1"), spec(None, "r2"), fleet).problem is None
    assert judge(spec(None, "r1"), spec("1.33.4", "r1"), fleet).problem is None


def test_allowed_versions_as_the_operator_reads_them() -> None:
    now = running(spec("1.33.4"), [deployed("w1", "1.31.2")])
    assert now is not None
    assert allowed(now).startswith("none until the machines at 1.31.2 reach 1.33")


def test_admitted_raises_naming_the_field_and_records_a_forced_downgrade() -> None:
    with pytest.raises(InvalidDocument) as refused:
        admitted(spec("1.33.4"), spec("1.35.0"), FLEET)
    assert [p.path for p in refused.value.problems] == [FIELD]
    stored, verdict = admitted(spec("1.34.1"), spec("1.34.0"), FLEET, force=True)
    assert verdict.downgrade and stored.settings.kubernetes.allow_downgrade
    # the file cannot set it; the stored value stays while the version does
    said = spec("1.34.0", "r2")
    said = said.model_copy(update={"settings": said.settings.model_copy(update={
        "kubernetes": said.settings.kubernetes.model_copy(update={"allow_downgrade": True})})})
    assert not admitted(spec("1.33.4"), said, FLEET)[0].settings.kubernetes.allow_downgrade
    assert admitted(stored, spec("1.34.0", "r3"), FLEET)[0].settings.kubernetes.allow_downgrade


def packages(version: str) -> ClusterSpec:
    """Machines whose package and upgrade items are keyed by the Kubernetes version, as the
    profile's are."""
    def keyed(name: str, phase: str) -> StateItem:
        return StateItem.model_validate({"name": name, "phase": phase, "version": version,
                                         "action": {"type": "exec", "argv": ["true"]}})

    role = [keyed("packages", "prepare"), item("join", "deploy"), keyed("upgrade-kubelet", "upgrade")]
    return cluster(role, role, release=version, kubernetes={"version": version})


def test_the_planner_records_the_version_a_machine_deploys_and_upgrades_at() -> None:
    """Admitted into Deploy at 1.33.4, w1 counts at 1.33.4 even though the spec moved to
    1.34.1 while it deployed: it reaches Ready not recorded at 1.34.1 (its packages are
    1.33.4's), upgrades, and only then counts at 1.34.1."""
    v133, v134 = packages("1.33.4"), packages("1.34.1")
    m1 = settled(v133, deployed("m1", "1.33.4", "manager"))
    w1 = finish_phase(v133, machine("w1", state=S.PREPARE))
    fleet, _ = plan_to_fixpoint(v133, [m1, w1], 0.0)
    assert (fleet[1].state, fleet[1].kubernetes) == (S.DEPLOY, "1.33.4")
    fleet = [fleet[0], finish_phase(v133, fleet[1])]
    fleet, decisions = plan_to_fixpoint(v134, fleet, 0.0)
    assert [(d.hostname, d.to_state) for d in decisions] == [("w1", S.READY), ("m1", S.UPGRADE)]
    assert (fleet[1].release, fleet[1].kubernetes) == ("", "1.33.4")
    assert [i.name for i, _ in to_run(v134, fleet[1])] == ["packages", "upgrade-kubelet"]
    now = running(v134, fleet)
    assert now is not None and now.lowest == parse("1.33.4")
    for _ in range(2):  # m1's upgrade, then w1's
        fleet, _ = plan_to_fixpoint(v134, [upgraded(v134, m) for m in fleet], 0.0)
    assert [(m.state, m.release, m.kubernetes) for m in fleet] == [
        (S.READY, "1.34.1", "1.34.1"), (S.READY, "1.34.1", "1.34.1")]


def settled(spec: ClusterSpec, m: Machine) -> Machine:
    """m Ready at spec's release, every item of its role applied."""
    assert m.role is not None
    return replace(m, release=spec.release, applied=frozenset(
        i.fingerprint() for i in getattr(spec.machine_types, m.role)))


def upgraded(spec: ClusterSpec, m: Machine) -> Machine:
    """m once an upgrade it is in ran its items and its node is Ready again."""
    if m.state is not S.UPGRADE:
        return m
    m = drained(m, DrainStage.NODE_READY)
    return replace(m, applied=m.applied | {f for _, f in to_run(spec, m)})


def test_no_machine_joins_a_control_plane_older_than_its_kubelet() -> None:
    """w1 prepared at 1.34.1 while m1's control plane still runs 1.33.4: w1 waits in Prepare
    (a kubelet must never be newer than the kube-apiserver), m1 upgrades first, then w1 joins."""
    v134 = packages("1.34.1")
    m1 = settled(packages("1.33.4"), deployed("m1", "1.33.4", "manager"))
    w1 = finish_phase(v134, machine("w1", state=S.PREPARE))
    fleet, decisions = plan_to_fixpoint(v134, [m1, w1], 0.0)
    assert [(d.hostname, d.to_state) for d in decisions] == [("m1", S.UPGRADE)]
    fleet, decisions = plan_to_fixpoint(v134, [upgraded(v134, m) for m in fleet], 0.0)
    assert [(d.hostname, d.to_state) for d in decisions] == [("m1", S.READY), ("w1", S.DEPLOY)]


def test_a_prepared_machine_held_for_the_control_plane_says_so() -> None:
    v134 = packages("1.34.1")
    m1 = settled(packages("1.33.4"), deployed("m1", "1.33.4", "manager"))
    w1 = finish_phase(v134, machine("w1", state=S.PREPARE))
    assert join_wait(v134, w1, [m1, w1]) == (
        "prepared; waits for the control plane to reach Kubernetes 1.34.1: manager m1 runs "
        "1.33.4, and a kubelet never joins an older API server; the managers upgrade first")
    assert join_wait(v134, machine("w2", state=S.PREPARE), [m1]) == "", "still preparing"
    assert join_wait(v134, w1, [replace(m1, kubernetes="1.34.1")]) == ""


# `cluster apply` changing settings.kubernetes.version, as a table: the stored version, the
# new one (with a new release), what the machines run, whether the operator forced a
# downgrade, and the verdict: accepted (None), accepted as a forced downgrade ("downgrade"),
# or refused with these words.
MIXED = [deployed("m1", "1.34.1", "manager"), deployed("w1", "1.33.4")]
VERSION_CHANGES = [
    pytest.param("1.33.4", "1.33.5", FLEET, False, None, id="a patch up"),
    pytest.param("1.33.4", "1.34.0", FLEET, False, None, id="one minor up"),
    pytest.param("1.33.4", "1.35.0", FLEET, False, "1.35.0 skips a minor",
                 id="two minors up: refused"),
    pytest.param("1.33.4", "1.35.0", FLEET, True, "1.35.0 skips a minor",
                 id="two minors up even forced: refused"),
    pytest.param("1.34.1", "1.35.0", MIXED, False, "allowed: 1.34.x from 1.34.1",
                 id="from an unfinished upgrade, counted from the machine left behind"),
    pytest.param("1.33.4", "1.33.3", FLEET, False, "1.33.3 is a downgrade",
                 id="a downgrade refused"),
    pytest.param("1.33.4", "1.32.9", FLEET, True, "downgrade", id="one minor down forced"),
    pytest.param("1.33.4", "1.31.0", FLEET, True, "more than one minor below 1.33.4",
                 id="two minors down even forced: refused"),
    pytest.param("1.33.4", "1.35.0", [machine("w1")], False, None,
                 id="no machine approved yet: any version"),
]


@pytest.mark.parametrize(("old", "new", "machines", "force", "verdict"), VERSION_CHANGES)
def test_version_change_table(old: str, new: str, machines: list[Machine], force: bool,
                              verdict: str | None) -> None:
    judged = judge(spec(old), spec(new), machines, force)
    if verdict is None:
        assert judged == judge(None, spec(new), []), judged
    elif verdict == "downgrade":
        assert judged.problem is None and judged.downgrade
    else:
        assert judged.problem is not None and verdict in judged.problem, judged.problem


WARNED = [  # what apply and the upgrade plan warn of, in the same words (versions.warnings)
    pytest.param(spec("1.33.4", "2.1.0"), spec("1.33.4", "1.0.0"), False,
                 ["release 1.0.0 is older than 2.1.0, the cluster's: nothing is rolled back"],
                 id="an older release: nothing is rolled back"),
    pytest.param(spec("1.33.4", "v2.1"), spec("1.33.4", "v2.0.9"), False,
                 ["release v2.0.9 is older than v2.1"], id="dotted numbers, with a v"),
    pytest.param(spec("1.33.4", "1.0.0"), spec("1.33.4", "2.1.0"), False, [],
                 id="a newer release"),
    pytest.param(spec("1.33.4", "blue"), spec("1.33.4", "green"), False, [],
                 id="releases that are not numbers: not ordered"),
    pytest.param(spec("1.33.4", "r1"), spec("1.32.9", "r2"), True,
                 ["Kubernetes 1.33.4 -> 1.32.9 at release r2: a downgrade, forced"],
                 id="a forced downgrade"),
    pytest.param(spec("1.33.4"), spec("1.32.9"), True,
                 ["Kubernetes 1.33.4 -> 1.32.9 at release 1.32.9: a downgrade, forced"],
                 id="a forced downgrade whose release follows the version: said once"),
]


@pytest.mark.parametrize(("before", "after", "force", "said"), WARNED)
def test_what_a_change_warns_of_table(before: ClusterSpec, after: ClusterSpec, force: bool,
                                      said: list[str]) -> None:
    found = warnings(before, after, judge(before, after, FLEET, force))
    assert len(found) == len(said), found
    assert all(w.startswith(s) for w, s in zip(found, said, strict=True)), found
