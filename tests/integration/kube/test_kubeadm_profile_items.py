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
one minted again, the endpoint the joiners are given always names a port, kubeadm's
preflight finds containerd, as the profile configures it, on kubeadm's pause image from the
cluster's image repository (a mirror too), and the certificate renewal item renews every
certificate and restarts the control plane's pods to load them."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.domain.model import ClusterSpec, Machine, MachineState, MintJob
from coordinator.domain.views.fleet import Fleet, hypothetical_fleet
from tests.support.k8s_doubles import control
from tests.support.k8s_doubles.calls import agent_env, calls
from tests.support.k8s_doubles.common import now as now_of
from tests.support.k8s_doubles.common import state
from tests.support.k8s_doubles.control import doubled_lan
from tests.support.k8s_doubles.kubeadm import client_certificate
from tests.support.k8s_doubles.kubelet import HEARTBEAT
from tests.support.k8s_doubles.pki import not_after
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
from tests.support.kubeapi import KubeApiServer, kube_api_server
from tests.support.lan import Lan, Node
from tests.support.netns import namespace
from tests.support.requirements import require_binary
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
        ok(self.apply(first, deploy["apiserver-proxy"]))
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


HA_ENDPOINT = "127.0.0.1:6444"  # the local proxy every node runs (apiserver-proxy.sh)
# The prepare items deploy's run on: kubeadm's phases one at a time, the local API proxy.
PREPARED = ("phases-script", "kubeconfig-script", "apiserver-proxy-script",
            "apiserver-proxy-unit", "etcd-snapshot-script", "etcd-restore-script")


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
        for machine in machines:  # what Prepare left: the scripts and unit deploy items run
            prepare = rendered(spec, machine, machines, "prepare")
            for name in (n for n in PREPARED if n in prepare):  # managers' alone: theirs
                cluster.apply(machine, prepare[name])
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
        ok(cluster.apply(first, deploy["apiserver-proxy"]))
        cluster.apply(first, deploy["init-config"])
        died, printed = until_done(cluster, first, deploy["init"], "init", INIT_PHASES)
        assert died == INIT_PHASES, "each run resumed at the phase that died"
        assert not outputs(printed), "init prints none: the control-plane item does"
        produced = cluster.control_plane(first)
        assert produced["control-plane.endpoint"] == HA_ENDPOINT
        # Each phase ran to its end once (a killed run records nothing), in kubeadm's order.
        assert [c.argv[2] for c in calls(tmp_path / "log")
                if c.is_("kubeadm", "init", "phase")] == INIT_PHASES

        for joiner, phases in ((manager, MANAGER_JOIN_PHASES), (worker, WORKER_JOIN_PHASES)):
            machines = deployed(cluster.machines, produced, cluster.minted)
            joining = next(m for m in machines if m.id == joiner.id)
            deploy = rendered(spec, joining, machines, "deploy")
            ok(cluster.apply(joiner, deploy["apiserver-proxy"]))
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
        ok(cluster.apply(manager, deploy["apiserver-proxy"]))
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


def test_the_snapshot_taken_before_an_upgrade_restores_etcd_to_what_it_held(
        tmp_path: Path) -> None:
    """The upgrade's etcd-snapshot item saves the real etcd through its container and leaves
    the file its etcdSnapshotFrom names; after etcd changed, the restore script of
    docs/kubernetes.md stops the control plane, restores the snapshot and starts it again: the
    kubelet's etcd serves what it held then, as a cluster of this member alone, and the data
    dir it replaced is kept."""
    spec = profile_spec()
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 0)) as cluster:
        (first,) = cluster.machines
        machines = deployed(cluster.machines, cluster.init(), cluster.minted)
        root, prefix = cluster.root(first), cluster.node(first).ns.argv([])
        endpoint = [control.etcd.client_url("127.0.0.1")]

        def etcdctl(*args: str) -> str:
            return ok(control.etcd.etcdctl(root, endpoint, *args, prefix=prefix))

        etcdctl("put", "/registry/secrets/default/kept", "before the upgrade")
        upgrade = rendered(spec, first, machines, "upgrade")
        taken = ok(cluster.apply(first, upgrade["etcd-snapshot"]))
        snapshot = root / "etc/kubernetes/nodeagent/etcd-snapshot.db"
        assert "Snapshot saved" in taken and snapshot.stat().st_mode & 0o777 == 0o600
        held = tmp_path / "downloaded.db"  # as `coordinator cluster etcd-snapshot` writes it
        held.write_bytes(snapshot.read_bytes())
        etcdctl("put", "/registry/secrets/default/kept", "broken by the upgrade")
        etcdctl("put", "/registry/secrets/default/later", "written after the snapshot")

        restored = ok(cluster.run(first, ["sh", "usr/local/lib/nodeagent/kubeadm/etcd-restore.sh",
                                          str(held), first.hostname, first.ip or ""]))
        assert f"etcd of {first.hostname} restored" in restored
        wait_until(lambda: control.etcd.etcdctl(root, endpoint, "endpoint", "health",
                                                prefix=prefix).returncode == 0,
                   30, "the restored etcd serves", interval=0.5)
        kept = etcdctl("get", "/registry/secrets/default/kept", "--print-value-only")
        later = etcdctl("get", "/registry/secrets/default/later", "--print-value-only")
        members = control.etcd_members(root, prefix)
        pods = control.pods(cluster.state, root)
    assert kept.strip() == "before the upgrade" and later.strip() == ""
    assert [m["name"] for m in members] == [first.hostname]
    assert sorted(pods) == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert [p.name for p in (root / "var/lib").glob("etcd.before-restore-*")]
    assert not list((root / "etc/kubernetes/nodeagent/restore-held").iterdir())


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

        deploy = rendered(spec, holding(first_token)[1], holding(first_token), "deploy")
        ok(cluster.apply(worker, deploy["apiserver-proxy"]))
        cluster.apply(worker, deploy["join-config"])
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


@pytest.mark.parametrize(("setting", "endpoint"), [
    (None, HA_ENDPOINT), ("k8s-api.test", "k8s-api.test:6443")])
def test_init_gives_the_joiners_an_endpoint_with_a_port(
        tmp_path: Path, setting: str | None, endpoint: str) -> None:
    """No setting: the local proxy's endpoint, never the first manager's address; a setting
    (a load balancer) without a port: kubeadm's 6443 added, and no local proxy; written into
    init.yaml as the joiners get it."""
    spec = profile_spec(control_plane_endpoint=setting)
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 0)) as cluster:
        (first,) = cluster.machines
        produced = cluster.init()
    assert produced["control-plane.endpoint"] == endpoint
    config = (cluster.root(first) / "etc/kubernetes/nodeagent/init.yaml").read_text()
    assert f'controlPlaneEndpoint: "{endpoint}"' in config
    reported = cluster.root(first) / "etc/kubernetes/nodeagent/coordinator.conf"  # kubeconfigFrom
    assert reported.stat().st_mode & 0o777 == 0o600
    proxy = cluster.root(first) / "etc/haproxy/kube-apiserver.cfg"
    assert proxy.exists() is (setting is None), "a load balancer of one's own: no local proxy"


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


def test_the_renewal_item_renews_the_certificates_and_restarts_the_control_plane_to_load_them(
        tmp_path: Path) -> None:
    """The certs-renew item (a release with a new settings.kubernetes.certificateRenewal) on a
    manager whose certificates expire in 25 days: every one signed for a year from now, each
    control-plane pod started again (they load certificates only when they start), etcd
    whole; run again after dying with a manifest held, it puts the manifest back first."""
    spec = profile_spec(certificate_renewal="2027-06")
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 0)) as cluster:
        first = cluster.machines[0]
        root = cluster.root(first)
        cluster.init()
        control.advance(cluster.state, 340 * 86400)
        before = control.pods(cluster.state, root)
        assert sorted(before) == ["etcd", "kube-apiserver", "kube-controller-manager",
                                  "kube-scheduler"]
        renew = rendered(spec, first, cluster.machines, "upgrade")["certs-renew"]
        printed = ok(cluster.apply(first, renew))
        assert "certificate renewal 2027-06" in printed
        with state(cluster.state) as data:
            now = now_of(data)
        admin = client_certificate((root / "etc/kubernetes/admin.conf").read_text())
        assert admin is not None and abs(not_after(admin) - (now + 365 * 86400)) < 60
        assert "admin.conf                 " in printed and "364d" in printed  # its table
        after = control.pods(cluster.state, root)
        assert sorted(after) == sorted(before) and all(after[p] != before[p] for p in before)

        # Died with etcd's manifest held (as if the agent was killed mid-restart): run again.
        held = root / "etc/kubernetes/nodeagent/restarting"
        (root / "etc/kubernetes/manifests/etcd.yaml").rename(held / "etcd.yaml")
        ok(cluster.apply(first, renew))
        assert (root / "etc/kubernetes/manifests/etcd.yaml").exists()
        assert not list(held.iterdir())
        members = control.etcd_members(root, cluster.node(first).ns.argv([]))
    assert [m["name"] for m in members] == [first.hostname]


@pytest.mark.parametrize("repository", ["registry.k8s.io", "mirror.test:5000/k8s"])
def test_kubeadms_preflight_finds_containerd_on_its_pause_image_from_the_clusters_repository(
        tmp_path: Path, repository: str) -> None:
    """kubeadm warns when the runtime's sandbox image is not the pause image it pulls from the
    cluster's imageRepository; with a mirror (air-gapped) the other one cannot even be pulled,
    and no pod starts. containerd's configuration as the profile writes it leaves no warning."""
    spec = profile_spec(image_repository=repository)
    with cluster_on_a_lan(tmp_path, spec, Fleet(1, 1)) as cluster:
        first = cluster.machines[0]
        cluster.apply(first, rendered(spec, first, cluster.machines, "prepare")["containerd-config"])
        cluster.apply(first, rendered(spec, first, cluster.machines, "deploy")["init-config"])
        preflight = ["kubeadm", "init", "phase", "preflight", "--config",
                     "/etc/kubernetes/nodeagent/init.yaml"]
        ok(cluster.run(first, preflight))
        ok(cluster.run(first, ["sed", "-i", f"s|{repository}/pause|registry.example/pause|",
                               "etc/containerd/config.toml"]))  # another: kubeadm warns
        warned = cluster.run(first, preflight)
    preflights = [c for c in calls(tmp_path / "log") if c.is_("kubeadm", "init", "phase")]
    assert [c.details.get("warnings") for c in preflights] == [None, [
        'detected that the sandbox image "registry.example/pause:3.10" of the container runtime '
        'is inconsistent with that used by kubeadm. It is recommended to use '
        f'"{repository}/pause:3.10" as the CRI sandbox image.']]
    assert "inconsistent with that used by kubeadm" in warned.stderr
def proxied(root: Path) -> set[str]:
    """The API servers the local proxy of the node whose root is root is configured for."""
    config = (root / "etc/haproxy/kube-apiserver.cfg").read_text()
    return set(re.findall(r"^  server \S+ (\S+)$", config, re.M))


def kubelet_server(root: Path) -> str:
    config = yaml.safe_load((root / "etc/kubernetes/kubelet.conf").read_text())
    return str(config["clusters"][0]["cluster"]["server"])


def beating_since(server: KubeApiServer, since: float) -> set[str]:
    """The Nodes whose kubelet's heartbeat (through its kubelet.conf's server) came after since."""
    with server.locked() as api:
        return {name for name, node in api.nodes.items()
                if float(node["metadata"].get("annotations", {}).get(HEARTBEAT, 0)) > since}


def test_every_kubelet_reaches_the_api_through_the_local_proxy_while_any_one_manager_is_down(
        tmp_path: Path) -> None:
    """3 managers and a worker deployed as the planner deploys them: each joiner's ${managers}
    the managers deployed before it, every deployed machine's reconfigure item run again once a
    manager was added. Every node's proxy then fronts every manager; every kubelet.conf names the
    local endpoint (a manager's its own API server: kubeadm's ControlPlaneKubeletLocalMode),
    kube-proxy and cluster-info too, never one manager's address. With any one manager down,
    every other kubelet keeps its heartbeats; a removed manager leaves every proxy through the
    reconfigure item. (With the profile before, every kubelet.conf and cluster-info named the
    first manager: its kubelets lost the API with it.)"""
    spec = profile_spec()
    with cluster_on_a_lan(tmp_path, spec, Fleet(3, 1)) as cluster:
        machines = [replace(m, state=MachineState.DEPLOY) for m in cluster.machines]
        managers, worker = cluster.machines[:3], cluster.machines[3]
        produced: dict[str, str] = {}

        def view(joiner: Machine) -> list[Machine]:
            if not produced:
                return machines
            return deployed(machines, produced,
                            lambda m: cluster.minted(m) if m.id == joiner.id else {})

        def reconfigure(peers: list[Machine]) -> None:
            """What the planner has every deployed machine run once the managers changed."""
            for other in (m for m in peers if m.state is MachineState.READY):
                items = rendered(spec, other, peers, "reconfigure")
                ok(cluster.apply(other, items["apiserver-proxy-managers"]))

        for machine in cluster.machines:
            peers = view(machine)
            deploy = rendered(spec, next(m for m in peers if m.id == machine.id), peers, "deploy")
            for name in [n for n in deploy if n != "cni"]:
                printed = ok(cluster.apply(machine, deploy[name]))
                produced = produced or outputs(printed)
            machines = [replace(m, state=MachineState.READY) if m.id == machine.id else m
                        for m in machines]
            if machine.role == "manager":
                reconfigure(machines)
        addresses = {f"{m.ip}:6443" for m in managers}
        assert {m.hostname: proxied(cluster.root(m)) for m in cluster.machines} == {
            m.hostname: addresses for m in cluster.machines}
        assert {m.hostname: kubelet_server(cluster.root(m)) for m in cluster.machines} == {
            **{m.hostname: f"https://{m.ip}:6443" for m in managers},
            worker.hostname: f"https://{HA_ENDPOINT}"}
        with state(cluster.state) as data:
            assert data["kube_proxy"] == {"server": f"https://{HA_ENDPOINT}"}
            assert data["cluster_info"]["endpoint"] == HA_ENDPOINT
        everyone = {m.hostname for m in cluster.machines}
        since = time.time()
        wait_until(lambda: beating_since(cluster.api, since) == everyone, 20,
                   "every kubelet's heartbeat", interval=0.5)

        for down in managers:  # each manager down in turn, then up again
            control.power_off(cluster.state, cluster.root(down))
            since = time.time() + 2  # the proxies' health checks mark it down within 2 s
            up = everyone - {down.hostname}
            wait_until(lambda: up <= beating_since(cluster.api, since), 20,  # noqa: B023
                       f"heartbeats with {down.hostname} down", interval=0.5)
            for unit in ("kubelet", "kube-apiserver-proxy"):
                ok(cluster.run(down, ["systemctl", "start", unit]))

        # The first manager removed: the others' reconfigure items take it out of their proxy,
        # its reset item stops its own, then it goes down.
        first = managers[0]
        machines = [replace(m, state=MachineState.DELETING) if m.id == first.id else m
                    for m in machines]
        reconfigure(machines)
        connect = ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6444"]
        ok(cluster.run(first, connect))  # its proxy listens, until its reset item:
        ok(cluster.apply(first, rendered(spec, machines[0], machines, "reset")[
            "apiserver-proxy-remove"]))
        listening = cluster.run(first, connect)
        control.power_off(cluster.state, cluster.root(first))
        since = time.time()
        wait_until(lambda: everyone - {first.hostname} <= beating_since(cluster.api, since), 20,
                   "heartbeats once the first manager left", interval=0.5)
    assert {m.hostname: proxied(cluster.root(m)) for m in cluster.machines[1:]} == {
        m.hostname: addresses - {f"{first.ip}:6443"} for m in cluster.machines[1:]}
    assert listening.returncode != 0, "the removed manager's proxy still listens"
    assert not (cluster.root(first) / "etc/haproxy/kube-apiserver.cfg").exists()


def test_an_ipv6_manager_serves_the_api_through_its_local_proxy(tmp_path: Path) -> None:
    """A first manager whose address is IPv6 (fd00::10, in a namespace of its own), through
    the profile's items: its proxy fronts [fd00::10]:6443 (haproxy took the file), init runs
    with the endpoint 127.0.0.1:6444, cluster-info and kubeadm-config name it, the kubelet's
    heartbeats reach its API server at https://[fd00::10]:6443 (its certificate names the
    address), and a client of the proxy reads cluster-info checking the CA. (With the profile
    before, init's endpoint was fd00::10:6443: kubeadm reads that as the address fd00::10:6443,
    where nothing answers.)"""
    for binary in ("etcd", "haproxy"):
        require_binary(binary)
    spec = profile_spec()
    (machine,) = hypothetical_fleet(spec, Fleet(1, 0))
    machine = replace(machine, ip="fd00::10", state=MachineState.DEPLOY)
    root = tmp_path / machine.hostname
    root.mkdir()
    with namespace(machine.hostname) as ns, kube_api_server(netns=ns.name) as api:
        assert ns.run(["ip", "addr", "add", "fd00::10/128", "dev", "lo", "nodad"]).returncode == 0
        env = agent_env(tmp_path / "log", tmp_path / "state", api.url)
        try:
            prepare = rendered(spec, machine, [machine], "prepare")
            for name in PREPARED:
                write_file_item(prepare[name], root)
            deploy = rendered(spec, machine, [machine], "deploy")
            for name in ("apiserver-proxy", "init-config", "init"):
                if deploy[name]["type"] == "file":
                    write_file_item(deploy[name], root)
                else:
                    ok(run_exec_item(deploy[name], root, env, ns.argv([])))
            with state(tmp_path / "state") as data:
                info, cluster = data["cluster_info"], data["cluster"]
            fetch = ("import ssl, sys, urllib.request; ca = ssl.create_default_context(cafile="
                     "sys.argv[1]); print(urllib.request.urlopen(sys.argv[2], context=ca).status)")
            through = ns.run([sys.executable, "-c", fetch, str(root / "etc/kubernetes/pki/ca.crt"),
                              f"https://{HA_ENDPOINT}/api/v1/namespaces/kube-public/configmaps/"
                              "cluster-info"])
            since = time.time()
            wait_until(lambda: beating_since(api, since) == {machine.hostname}, 20,
                       "the IPv6 kubelet's heartbeats", interval=0.5)
        finally:
            control.stop_all(tmp_path / "state")
    assert proxied(root) == {"[fd00::10]:6443"}
    assert info["endpoint"] == cluster["endpoint"] == HA_ENDPOINT
    assert through.stdout.strip() == "200", through.stderr
    assert kubelet_server(root) == "https://[fd00::10]:6443"
