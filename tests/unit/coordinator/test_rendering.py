"""What `cluster render` shows, without a store: each item's texts filled in as the agent fills
them in, secrets named and never shown, the phases each machine would be assigned."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.assignments.assignment import AssignmentInputs, build_assignment
from coordinator.domain.errors import NotFound
from coordinator.domain.model import MachineState
from coordinator.domain.records import StoredCluster
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.fleet import MAX_MACHINES, Fleet, parse_fleet
from coordinator.domain.views.rendering import (
    ORDER,
    RenderedMachine,
    Values,
    render_cluster,
    render_item,
)
from nodeagent.wire.contract import PHASES
from nodeagent.wire.protocol import StateItem
from tests.support.builders import MINTING_CLUSTER, at_release, cluster, machine

SPEC = cluster(
    manager=[
        StateItem.model_validate(
            {"name": "init", "phase": "deploy", "action": {
                "type": "exec", "argv": ["kubeadm", "init", "--node-name=${machine.hostname}",
                                         "--endpoint=${managers.first}"],
                "env": {"CLUSTER": "${cluster.name}"}, "cwd": "/srv/${cluster.name}"}}),
        StateItem.model_validate(
            {"name": "cni", "phase": "postdeploy", "version": "1.4",
             "versionCommand": ["cni", "--version", "${cluster.release}"],
             "action": {"type": "exec", "argv": ["cni", "install"]}}),
        StateItem.model_validate(
            {"name": "peers", "phase": "reconfigure",
             "action": {"type": "exec", "argv": ["peers", "${managers}"]}}),
    ],
    worker=[
        StateItem.model_validate(
            {"name": "kubelet", "phase": "prepare", "action": {
                "type": "file", "path": "/etc/kubelet.conf", "mode": "0600", "owner": "root",
                "template": "node: ${machine.hostname}\nip: ${machine.ip}\nhome: $${HOME}\n"}}),
        StateItem.model_validate(
            {"name": "motd", "phase": "prepare", "action": {
                "type": "file", "path": "/etc/motd", "content": "welcome to ${cluster.name}\n"}}),
        StateItem.model_validate(
            {"name": "runtime", "phase": "prepare", "action": {
                "type": "download", "url": "https://example.com/runtime.tgz",
                "sha256": "a" * 64, "path": "/opt/runtime.tgz", "mode": "0755"}}),
        StateItem.model_validate(
            {"name": "join", "phase": "deploy", "action": {
                "type": "exec", "argv": ["sh", "-c", "kubeadm join ${managers.first} $$1 $HOME"]}}),
        StateItem.model_validate(
            {"name": "kubelet-2", "phase": "upgrade",
             "action": {"type": "exec", "argv": ["upgrade", "${cluster.release}"]}}),
        StateItem.model_validate(
            {"name": "wipe", "phase": "reset", "action": {"type": "exec", "argv": ["kubeadm", "reset"]}}),
    ],
    name="lab", release="2.0")


def by_host(machines: list[RenderedMachine]) -> dict[str, RenderedMachine]:
    return {m.hostname: m for m in machines}


def phases(rendered: RenderedMachine) -> dict[str, dict[str, dict[str, object]]]:
    """phase: item name: its rendered action."""
    return {p.phase: {i.name: i.action for i in p.items} for p in rendered.phases}


def test_a_fleet_shows_each_machines_argv_env_cwd_and_file_template_filled_in() -> None:
    rendered = by_host(render_cluster(SPEC, [], Fleet(3, 50)).machines)
    assert len(rendered) == 53
    manager = phases(rendered["manager-1"])
    assert manager["deploy"]["init"] == {
        "type": "exec", "argv": ["kubeadm", "init", "--node-name=manager-1",
                                 "--endpoint=192.0.2.1"],
        "env": {"CLUSTER": "lab"}, "cwd": "/srv/lab", "expectedExitCodes": [0]}
    worker = phases(rendered["worker-50"])
    assert worker["prepare"]["kubelet"] == {
        "type": "file", "path": "/etc/kubelet.conf", "mode": "0600", "owner": "root",
        "template": "node: worker-50\nip: 192.0.2.53\nhome: ${HOME}\n"}
    # content is written as it is; a download has nothing to fill in
    assert worker["prepare"]["motd"]["content"] == "welcome to ${cluster.name}\n"
    assert worker["prepare"]["runtime"] == {
        "type": "download", "url": "https://example.com/runtime.tgz", "sha256": "a" * 64,
        "path": "/opt/runtime.tgz", "mode": "0755"}
    # $$ is a literal $, a bare $1 or $HOME stays as written
    assert worker["deploy"]["join"]["argv"] == ["sh", "-c", "kubeadm join 192.0.2.1 $1 $HOME"]


def test_every_manager_sees_every_manager_and_only_the_first_runs_the_post_deploy_step() -> None:
    rendered = by_host(render_cluster(SPEC, [], Fleet(3, 50)).machines)
    assert [p.phase for p in rendered["manager-1"].phases] == ["deploy", "postdeploy",
                                                              "reconfigure"]
    assert [p.phase for p in rendered["manager-2"].phases] == ["deploy", "reconfigure"]
    first = phases(rendered["manager-1"])
    assert first["postdeploy"]["cni.version"] == {  # the versionCommand's check, filled in
        "type": "version", "argv": ["cni", "--version", "2.0"], "expect": "1.4"}
    assert first["reconfigure"]["peers"]["argv"] == ["peers", "192.0.2.1,192.0.2.2,192.0.2.3"]
    assert rendered["worker-1"].values["managers.hostnames"] == "manager-1,manager-2,manager-3"


def test_a_fleet_is_deployed_at_an_earlier_release_so_its_upgrade_runs_the_upgrade_items() -> None:
    worker = render_cluster(SPEC, [], Fleet(1, 1), machine="worker-1").machines[0]
    assert [p.phase for p in worker.phases] == ["prepare", "deploy", "upgrade", "reset"]
    assert phases(worker)["upgrade"] == {"kubelet-2": {
        "type": "exec", "argv": ["upgrade", "2.0"], "env": {}, "expectedExitCodes": [0]}}


def test_a_secret_value_is_named_never_shown_and_a_value_not_produced_yet_says_so() -> None:
    item = StateItem.model_validate({"name": "join", "phase": "deploy", "action": {
        "type": "exec", "argv": ["kubeadm", "join", "--token=${outputs.init.token}",
                                 "--hash=${outputs.init.hash}", "${machine.hostname}"],
        "env": {"KEY": "${outputs.init.key}"}}})
    values = Values({"outputs.init.token": "abcdef.0123456789abcdef", "outputs.init.key": "k3y",
                     "machine.hostname": "w1"},
                    secret=frozenset({"outputs.init.token", "outputs.init.key",
                                      "outputs.init.hash"}),
                    missing=frozenset({"outputs.init.hash"}))
    rendered = render_item(item, values.shown())
    assert rendered.action["argv"] == [
        "kubeadm", "join", "--token=[secret ${outputs.init.token}]",
        "--hash=<${outputs.init.hash}: not produced yet>", "w1"]
    assert rendered.action["env"] == {"KEY": "[secret ${outputs.init.key}]"}
    assert "abcdef.0123456789abcdef" not in repr(rendered) + repr(values.shown())
    assert "k3y" not in repr(rendered) + repr(values.shown())


def test_a_text_that_cannot_be_filled_in_is_shown_as_written_with_why_the_node_would_fail() -> None:
    item = StateItem.model_validate({"name": "x", "phase": "deploy", "action": {
        "type": "exec", "argv": ["echo", "${machine.hostnme}", "${machine.hostname}"]}})
    rendered = render_item(item, {"machine.hostname": "w1"})
    assert rendered.action["argv"] == ["echo", "${machine.hostnme}", "w1"]
    assert rendered.problems == ("argv[1]: unknown template value ${machine.hostnme}; "
                                 "known: machine.hostname",)


def test_stored_machines_show_the_phases_they_may_be_assigned() -> None:
    preparing = replace(machine("w1", state=MachineState.PREPARE), ip="10.0.0.9", cluster="lab")
    deployed = frozenset(i.fingerprint() for i in SPEC.machine_types.worker
                         if i.phase in ("prepare", "deploy"))
    ready = at_release(SPEC, replace(machine("w2", state=MachineState.READY), applied=deployed))
    changed = replace(ready, hostname="w4", applied=ready.applied - {
        i.fingerprint() for i in SPEC.items("worker", "deploy")})
    unapproved = machine("w3", role=None, approved=False)
    rendering = render_cluster(SPEC, [preparing, ready, unapproved, changed])
    assert rendering.fleet is None
    rendered = by_host(rendering.machines)
    # not deployed: no upgrade; deployed at the release with nothing changed: nothing to
    # upgrade; deployed before its deploy item changed: its upgrade runs it again
    assert [p.phase for p in rendered["w1"].phases] == ["prepare", "deploy", "reset"]
    assert "upgrade" not in phases(rendered["w2"])
    assert list(phases(rendered["w4"])["upgrade"]) == ["join"]
    assert rendered["w3"].phases == ()
    assert phases(rendered["w1"])["prepare"]["kubelet"]["template"].startswith(
        "node: w1\nip: 10.0.0.9\n")


def test_what_is_rendered_is_what_the_assignment_carries() -> None:
    deploying = replace(machine("w1", state=MachineState.DEPLOY), ip="10.0.0.9", cluster="lab")
    assignment = build_assignment(
        AssignmentInputs(StoredCluster(SPEC, 1, 0.0, 0.0), deploying, [deploying]), None)
    rendered = render_cluster(SPEC, [deploying], phase="deploy").machines[0]
    assert [i.name for i in rendered.phases[0].items] == [i.name for i in assignment.items]
    assert rendered.values == assignment.values


def test_one_machine_one_phase_and_an_unknown_machine() -> None:
    rendering = render_cluster(SPEC, [], Fleet(3, 50), machine="worker-7", phase="deploy")
    assert [(m.hostname, [p.phase for p in m.phases]) for m in rendering.machines] == [
        ("worker-7", ["deploy"])]
    with pytest.raises(NotFound, match=r"no machine worker-51 in the hypothetical fleet "
                                       r"\(manager-1..manager-3, worker-1..worker-50\)"):
        render_cluster(SPEC, [], Fleet(3, 50), machine="worker-51")
    with pytest.raises(NotFound, match=r"no machine w2 in the hypothetical fleet \(manager-1\)$"):
        render_cluster(SPEC, [], Fleet(1, 0), machine="w2")
    with pytest.raises(NotFound, match="no machine with id or hostname w9 in cluster lab"):
        render_cluster(SPEC, [machine("w1")], machine="w9")
    # a hostname as Kubernetes compares node names, lowercased
    assert [m.hostname for m in render_cluster(SPEC, [machine("w1")], machine="W1").machines] \
        == ["w1"]


def test_a_cluster_without_machines_renders_the_smallest_fleet() -> None:
    rendering = render_cluster(SPEC, [])
    assert rendering.fleet == Fleet(1, 1)
    assert [m.hostname for m in rendering.machines] == ["manager-1", "worker-1"]


def test_every_phase_has_its_place() -> None:
    assert sorted(ORDER) == sorted(PHASES)


@pytest.mark.parametrize(("text", "why"), [
    ("3", "expected MANAGERS,WORKERS, e.g. 3,50"),
    ("3,x", "expected MANAGERS,WORKERS"),
    ("-1,2", "expected MANAGERS,WORKERS"),
    ("0,5", "at least one manager"),
    (f"3,{MAX_MACHINES}", f"at most {MAX_MACHINES} machines"),
])
def test_a_bad_fleet_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_fleet(text)


def test_a_fleet_of_the_most_machines_gets_an_address_each() -> None:
    rendering = render_cluster(cluster(name="lab"), [], parse_fleet(f"1,{MAX_MACHINES - 1}"))
    addresses = {m.ip for m in rendering.machines}
    assert len(addresses) == MAX_MACHINES and "203.0.113.254" in addresses


def test_a_fleets_managers_show_the_mint_and_revoke_they_would_run_for_a_joiner() -> None:
    """Every manager may be asked to mint (and revoke) a joiner's material: the fleet shows
    each doing it for its last machine, with the items minting would choose for it (those
    its deploy items use), values filled in, the material named, never shown."""
    spec = load_spec(MINTING_CLUSTER, "spec")
    rendered = by_host(render_cluster(spec, [], Fleet(2, 1)).machines)
    for manager in ("manager-1", "manager-2"):
        shown = phases(rendered[manager])
        assert list(shown)[-2:] == ["mint", "revoke"], manager
        assert shown["mint"] == {"token": {"type": "exec", "argv": [
            "kubeadm", "token", "create", "--ttl", "60s"], "env": {}, "expectedExitCodes": [0]}}
        assert shown["revoke"]["forget-token"]["argv"] == [
            "kubeadm", "token", "delete", "<${outputs.token.token}: not produced yet>"]
        assert {p.joiner for p in rendered[manager].phases if p.phase in ("mint", "revoke")} \
            == {"worker-1"}
    assert "mint" not in phases(rendered["worker-1"])
    managers = by_host(render_cluster(spec, [], Fleet(3, 0)).machines)
    assert list(phases(managers["manager-1"])["mint"]) == ["token", "certkey"], \
        "a manager joins with the certificate key too"
    alone = render_cluster(spec, [], Fleet(1, 0)).machines
    assert "mint" not in phases(alone[0]), "a fleet of one: no machine joins it"
