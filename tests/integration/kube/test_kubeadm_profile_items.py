"""The kubeadm profile's init and join items, as the agents render them, on nodes that are network
namespaces of a LAN, against the strict kubeadm double (tests/support/k8s_doubles) and Debian's
real etcd, each item run in its node's root as the agent runs it.

kubeadm is killed at every phase boundary of the first manager's init, of a manager's
control-plane join and of a worker's join, and the item run again each time, as the agent runs
an item that failed: each run resumes at the phase that died, the item completes, the outputs
come only with a control plane behind them (the control-plane item every manager runs after
its init or join, which gives the same outputs on each), and the cluster ends whole (one etcd
member per manager, each machine's Node). With the profile as it was (init skipped once
admin.conf existed, join once kubelet.conf did) the killed init "succeeded" without a control
plane and a join killed after kubelet-start was refused for good.

The leave item a remaining manager runs for a manager being deleted removes its member from the
real etcd, and says so when it is gone. Also: a worker whose first token expired joins with the
one minted again, and the endpoint the joiners are given always names a port."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.fleet import Fleet, hypothetical_fleet
from coordinator.domain.model import ClusterSpec, Machine, MintJob
from tests.support.k8s_doubles import control
from tests.support.k8s_doubles.calls import calls
from tests.support.k8s_doubles.common import state
from tests.support.k8s_doubles.control import doubled_lan
from tests.support.kubeadm_profile import (
    INIT_PHASES,
    MANAGER_JOIN_PHASES,
    WORKER_JOIN_PHASES,
    deployed,
    profile_spec,
    rendered,
    run_exec_item,
    write_file_item,
)
from tests.support.kubeapi import KubeApiServer
from tests.support.lan import Lan, Node
from tests.support.waiting import wait_until


@dataclass
class Cluster:
    """The LAN's nodes as the profile's machines (first manager, manager, worker)."""

    network: Lan
    tmp: Path
    env: dict[str, str]
    api: KubeApiServer
    spec: ClusterSpec
    machines: list[Machine]

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def node(self, machine: Machine) -> Node:
        return next(n for n in self.network.nodes if n.hostname == machine.hostname)

    def root(self, machine: Machine) -> Path:
        root = self.tmp / machine.hostname
        root.mkdir(exist_ok=True)
        return root

    def run(self, machine: Machine, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """argv on machine's node, in its root, with the doubles' environment."""
        return self.apply(machine, {"type": "exec", "argv": argv})

    def apply(self, machine: Machine, action: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """A rendered item as the agent applies it once (a file written; a command run)."""
        if action["type"] == "file":
            write_file_item(action, self.root(machine))
            return subprocess.CompletedProcess([], 0, "", "")
        return run_exec_item(action, self.root(machine), self.env,
                             self.node(machine).ns.argv([]))

    def init(self) -> dict[str, str]:
        """The first manager's init-config, init and control-plane items applied: the outputs
        the last printed."""
        first = self.machines[0]
        deploy = rendered(self.spec, first, self.machines, "deploy")
        ok(self.apply(first, deploy["init-config"]))
        ok(self.apply(first, deploy["init"]))
        return self.control_plane(first)

    def control_plane(self, manager: Machine) -> dict[str, str]:
        """The control-plane item applied on manager (its control plane up): its outputs."""
        item = rendered(self.spec, manager, self.machines, "deploy")["control-plane"]
        return outputs(ok(self.apply(manager, item)))

    def minted(self, joiner: Machine) -> dict[str, str]:
        """Join material for joiner, made on the first manager as the mint items make it."""
        first = self.machines[0]
        token = ok(self.run(first, ["kubeadm", "token", "create", "--ttl", "900s"])).strip()
        if joiner.role == "worker":
            return {"outputs.token.token": token}
        key = ok(self.run(first, ["kubeadm", "certs", "certificate-key"])).strip()
        ok(self.run(first, ["kubeadm", "init", "phase", "upload-certs", "--upload-certs",
                            "--certificate-key", key]))
        return {"outputs.token.token": token, "outputs.certkey.key": key}


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@contextlib.contextmanager
def cluster_on_a_lan(tmp: Path, spec: ClusterSpec, fleet: Fleet) -> Iterator[Cluster]:
    """fleet's machines of spec on the nodes of a LAN (the doubles' environment), each at its
    node's address, as Prepare left them."""
    machines = hypothetical_fleet(spec, fleet)
    with doubled_lan([m.hostname for m in machines], tmp) as (network, env, api):
        machines = [replace(m, ip=n.ip) for m, n in zip(machines, network.nodes, strict=True)]
        cluster = Cluster(network, tmp, env, api, spec, machines)
        for machine in machines:  # what Prepare left: the script init and join run
            cluster.apply(machine, rendered(spec, machine, machines, "prepare")["phases-script"])
        yield cluster


def outputs(printed: str) -> dict[str, str]:
    """The control-plane item's outputs (`NAME=value` lines) as `control-plane.NAME`."""
    return {f"control-plane.{k}": v for k, _, v in (line.partition("=") for line in
                                                    printed.splitlines())
            if k in ("caCertHash", "endpoint")}


def until_done(cluster: Cluster, machine: Machine, action: dict[str, Any], workflow: str,
               phases: list[str]) -> tuple[list[str], str]:
    """Run the item with kubeadm killed after each of phases (each hook fires once), again
    after every failure as the agent retries it: the phases each failed run died after (from
    the double's hooks) and the output of the run that succeeded."""
    hooks = [f"{machine.hostname}:{workflow}:{p}" for p in phases]
    control.arm(cluster.state, kill=hooks)
    died: list[str] = []
    for _ in range(len(phases) + 1):
        done = cluster.apply(machine, action)
        if done.returncode == 0:
            return died, done.stdout
        with state(cluster.state) as data:
            fired = list(data.get("fired", []))
        assert fired and fired[-1] in hooks and fired[-1].split(":")[-1] not in died, (
            done.stdout + done.stderr)
        died.append(fired[-1].split(":")[-1])
    raise AssertionError(f"{machine.hostname}'s {workflow} never completed (died after {died})")


def test_init_and_joins_killed_at_every_phase_boundary_resume_and_leave_the_cluster_whole(
        tmp_path: Path) -> None:
    spec = profile_spec()
    with cluster_on_a_lan(tmp_path, spec, Fleet(2, 1)) as cluster:
        first, manager, worker = cluster.machines
        deploy = rendered(spec, first, cluster.machines, "deploy")
        cluster.apply(first, deploy["init-config"])
        died, printed = until_done(cluster, first, deploy["init"], "init", INIT_PHASES)
        assert died == INIT_PHASES, "each run resumed at the phase that died"
        assert not outputs(printed), "init prints none: the control-plane item does"
        produced = cluster.control_plane(first)
        assert produced["control-plane.endpoint"] == f"{first.ip}:6443"
        # Each phase ran to its end once (a killed run records nothing), in kubeadm's order.
        assert [c.argv[2] for c in calls(tmp_path / "log")
                if c.is_("kubeadm", "init", "phase")] == INIT_PHASES

        for joiner, phases in ((manager, MANAGER_JOIN_PHASES), (worker, WORKER_JOIN_PHASES)):
            machines = deployed(cluster.machines, produced, cluster.minted)
            joining = next(m for m in machines if m.id == joiner.id)
            deploy = rendered(spec, joining, machines, "deploy")
            cluster.apply(joiner, deploy["join-config"])
            died, _ = until_done(cluster, joiner, deploy["join"], "join", phases)
            assert died == phases
        # The joined manager produces the same outputs: any manager can once the first is gone.
        assert cluster.control_plane(manager) == produced

        members = control.etcd_members(cluster.root(first), cluster.node(first).ns.argv([]))
        with cluster.api.locked() as api:
            nodes = set(api.nodes)
    assert sorted(m["name"] for m in members) == [first.hostname, manager.hostname]
    assert not [m for m in members if m["isLearner"]]
    assert nodes == {m.hostname for m in cluster.machines}


def test_the_leave_item_removes_a_leaving_managers_member_from_a_remaining_manager(
        tmp_path: Path) -> None:
    spec = profile_spec()
    with cluster_on_a_lan(tmp_path, spec, Fleet(2, 0)) as cluster:
        first, manager = cluster.machines
        machines = deployed(cluster.machines, cluster.init(), cluster.minted)
        deploy = rendered(spec, machines[1], machines, "deploy")
        ok(cluster.apply(manager, deploy["join-config"]))
        ok(cluster.apply(manager, deploy["join"]))
        etcd_of_first = (cluster.root(first), cluster.node(first).ns.argv([]))
        assert len(control.etcd_members(*etcd_of_first)) == 2
        job = MintJob(kind="leave", joiner=manager.id, hostname=manager.hostname,
                      ip=manager.ip or "", role="manager", serial=0, items=("etcd-member-remove",))
        leave = rendered(spec, replace(first, minting=job), machines, "leave")
        assert list(leave) == ["etcd-member-remove"]
        # etcd refuses a removal while a member joined less than 5 s ago ("unhealthy cluster"):
        # the item fails, and the agent runs it again, as here.
        removed = wait_until(lambda: (done := cluster.apply(first, leave["etcd-member-remove"]))
                             .returncode == 0 and done.stdout, 30, "the member removed",
                             interval=1)
        again = ok(cluster.apply(first, leave["etcd-member-remove"]))  # gone: nothing to do
        members = control.etcd_members(*etcd_of_first)
    assert [m["name"] for m in members] == [first.hostname]
    assert "removed from cluster" in removed
    assert f"the etcd member of {manager.hostname} is not in the cluster" in removed + again


def test_a_token_minted_again_replaces_the_expired_one_the_join_configuration_holds(
        tmp_path: Path) -> None:
    spec = profile_spec()
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 1)) as cluster:
        first, worker = cluster.machines
        produced = cluster.init()
        first_token = cluster.minted(worker)["outputs.token.token"]
        again = cluster.minted(worker)["outputs.token.token"]
        ok(cluster.run(first, ["kubeadm", "token", "delete", first_token]))

        def holding(token: str) -> list[Machine]:
            return deployed(cluster.machines, produced, lambda m: {"outputs.token.token": token})

        cluster.apply(worker, rendered(spec, holding(first_token)[1], holding(first_token),
                                       "deploy")["join-config"])
        ok(cluster.apply(worker, rendered(spec, holding(again)[1], holding(again),
                                          "deploy")["join"]))
        with cluster.api.locked() as api:
            node = api.nodes[worker.hostname]

    used = [c.details["token"] for c in calls(tmp_path / "log")
            if c.is_("kubeadm", "join") and "token" in c.details]  # discovery's (preflight)
    assert used == [again]
    join_yaml = (cluster.root(worker) / "etc/kubernetes/nodeagent/join.yaml").read_text()
    assert f'token: "{again}"' in join_yaml
    assert node["metadata"]["labels"]["nodeagent.io/machine-id"] == worker.id
    assert node["spec"]["providerID"] == f"nodeagent://k8s/{worker.id}"


@pytest.mark.parametrize(("setting", "endpoint", "written"), [
    (None, "{ip}:6443", '"{ip}:6443"'),
    ("k8s-api.test", "k8s-api.test:6443", '"k8s-api.test"')])
def test_init_gives_the_joiners_an_endpoint_with_a_port(
        tmp_path: Path, setting: str | None, endpoint: str, written: str) -> None:
    """No setting: the first manager's address, written into init.yaml too; a setting without
    a port: kubeadm's 6443 added for the joiners."""
    spec = profile_spec(control_plane_endpoint=setting)
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 0)) as cluster:
        (first,) = cluster.machines
        produced = cluster.init()
    assert produced["control-plane.endpoint"] == endpoint.format(ip=first.ip)
    config = (cluster.root(first) / "etc/kubernetes/nodeagent/init.yaml").read_text()
    assert f"controlPlaneEndpoint: {written.format(ip=first.ip)}" in config


def test_no_outputs_until_the_api_server_serves_cluster_info(tmp_path: Path) -> None:
    """Every init phase marked done (a run that died after its last phase) but cluster-info not
    served (the API server gone meanwhile): the control-plane item fails and prints no output,
    so no joiner is sent to a control plane that cannot answer it; served again, the same item
    prints them."""
    with cluster_on_a_lan(tmp_path, profile_spec(), Fleet(1, 0)) as cluster:
        (first,) = cluster.machines
        produced = cluster.init()
        with state(cluster.state) as data:
            served = data.pop("cluster_info")
        deploy = rendered(cluster.spec, first, cluster.machines, "deploy")
        rerun = ok(cluster.apply(first, deploy["init"]))
        refused = cluster.apply(first, deploy["control-plane"])
        with state(cluster.state) as data:
            data["cluster_info"] = served
        again = cluster.control_plane(first)
    assert "done before" in rerun and not outputs(rerun), rerun
    assert refused.returncode != 0
    assert 'configmaps "cluster-info" not found' in refused.stderr
    assert not outputs(refused.stdout), refused.stdout
    assert again == produced
