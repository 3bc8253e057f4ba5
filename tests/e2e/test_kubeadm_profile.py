"""The kubeadm profile (examples/kubeadm/cluster.yaml), unmodified, takes three managers and four
workers (real agents in network namespaces) to a cluster, labels and taints its Nodes, deletes
its first manager (any manager can do what it did: issue 33), takes a new manager and a new
worker, upgrades it one minor up (`kubeadm upgrade apply` once, on a surviving manager, before
the others' `upgrade node`; every kubelet at the new version), removes a worker (drained within
its budget, reset, its Node deleted) and a manager, and refuses to remove one more manager than
etcd's quorum allows.
The agents find the test doubles of tests/support/k8s_doubles first in their PATH: kubeadm
keeps its tokens and certificate key in a state shared by the nodes, checks every join as
kubeadm does, and registers each Node (the kubelet's part) in the test Kubernetes API server
on the LAN's hub, which the coordinator also reaches through the kubeconfig a Ready manager
reports.

What is asserted comes from the doubles' log of every call, with its host and its start and
end: who ran `kubeadm init` and when each machine joined with what; and from the test API
server: when each Node turned Ready (a Node registers NotReady until the network plugin runs on
it: tests/support/k8s_doubles/network.py), its labels and taints, evictions and deletions."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from tests.support.k8s_doubles.calls import Call, agent_env, calls
from tests.support.k8s_doubles.control import etcd_members, installed, stop_all
from tests.support.k8s_doubles.network import NetworkPlugin
from tests.support.kubeadm_profile import PROFILE
from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.lan import HUB_IP, Lan
from tests.support.requirements import require_binary
from tests.support.rollout import Fleet, all_ready, fleet
from tests.support.roots import passing_root

MANAGERS = ["m1", "m2", "m3"]
WORKERS = ["w1", "w2", "w3", "w4"]
LATE = ["m4", "w5"]  # joining once the first manager is gone
ALL_MANAGERS = [*MANAGERS, "m4"]
JOINERS = [*MANAGERS[1:], *WORKERS, *LATE]
SURVIVORS = [*ALL_MANAGERS[1:], *WORKERS, "w5"]  # what the upgrade finds: m1 deleted
UPGRADE_TO = "1.34.1"


def upgraded(profile: str, version: str) -> str:
    """The profile at another Kubernetes version, as its header says to upgrade: the version
    (whose anchor versions the upgrade items) and the release."""
    current = yaml.safe_load(profile)["settings"]["kubernetes"]["version"]
    return (profile.replace(f'release: "{current}"', f'release: "{version}"')
            .replace(f'version: &kubernetes "{current}"', f'version: &kubernetes "{version}"'))


def most_at_once(spans: list[Call]) -> int:
    """The most of these calls running at the same moment."""
    edges = sorted([(c.start, 1) for c in spans] + [(c.end, -1) for c in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def window(log: list[Call], host: str) -> tuple[float, float]:
    """From the first to the last call a machine's upgrade made (left out: kubectl, the
    post-deploy step's check on the first manager after the whole upgrade, and join material
    a manager mints or deletes for others)."""
    mine = [c for c in log if c.host == host and c.command != "kubectl"
            and not c.is_("kubeadm", "token")]
    return min(c.start for c in mine), max(c.end for c in mine)


def test_the_kubeadm_profile_builds_a_cluster_and_upgrades_it(tmp_path: Path) -> None:
    require_binary("etcd")  # each manager's real etcd, which the doubles run
    require_binary("etcdctl")
    require_binary("haproxy")  # each node's local API proxy, which the systemctl double runs
    profile = PROFILE.read_text()
    spec = yaml.safe_load(profile)
    log_path, state = tmp_path / "doubles.log", tmp_path / "doubles-state"
    servers: list[KubeApiServer] = []

    plugins: list[NetworkPlugin] = []

    def on_the_lan(network: Lan, stack: contextlib.ExitStack) -> dict[str, str]:
        servers.append(stack.enter_context(kube_api_server(
            Cluster(ready_delay=0.2), netns=network.hub.name, host=HUB_IP)))
        plugins.append(stack.enter_context(NetworkPlugin(servers[0], log_path)))
        stack.callback(stop_all, state)  # the kubelet doubles, static pods and etcd left running
        return agent_env(log_path, state, servers[0].url)

    bare_host(tmp_path / "roots" / "m1")
    with fleet(tmp_path, managers=MANAGERS, workers=WORKERS, cluster_spec=profile,
               agent_env=on_the_lan, late=tuple(LATE)) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f), timeout=150)
        prepared_on_a_bare_host(f, tmp_path)
        f.wait_for("the post-deploy step verified", lambda: any(
            e["kind"] == "post-deploy" and "verified" in e["message"] for e in f.events()))
        f.wait_for("every token deleted", lambda: tokens_left(calls(log_path)) == set())
        machines = {m["hostname"]: m for m in f.admin_json("machines")}
        nodes = nodes_of(servers[0])
        kubelet_servers = {h: yaml.safe_load((f.root(h) / "etc/kubernetes/kubelet.conf").read_text())[
            "clusters"][0]["cluster"]["server"] for h in MANAGERS + WORKERS}
        members = etcd_names(f, "m3")
        ready_at = {e["hostname"]: e["time"] for e in f.events()
                    if e["kind"] == "state" and e["data"].get("to") == "Ready"
                    and e["data"].get("from") == "Deploy"}
        labelled_and_tainted(f, servers[0], profile, tmp_path)
        kept = first_manager_deleted_then_joiners(f)
        everyone = {**machines, **{m["hostname"]: m for m in f.admin_json("machines")}}
        upgrade_from = time.time()
        (tmp_path / "upgraded.yaml").write_text(upgraded(profile, UPGRADE_TO))
        planned = f.admin("upgrade", "plan", spec["name"], "-f", str(tmp_path / "upgraded.yaml"))
        f.admin("cluster", "apply", "-f", str(tmp_path / "upgraded.yaml"))
        f.wait_for(f"every machine Ready at {UPGRADE_TO}", lambda: at_release(f, UPGRADE_TO),
                   timeout=150)
        kubelets = {h: installed(state, f.root(h)).get("kubelet") for h in SURVIVORS}
        snapshots = f.admin_json("cluster", "etcd-snapshots", spec["name"])
        kept_events = [json.loads(line)["message"] for line in f.admin(
            "events", "--cluster", spec["name"], "--kind", "etcd-snapshot", "-o", "json"
        ).splitlines() if line.strip()]
        f.admin("cluster", "etcd-snapshot", spec["name"], "--out", str(tmp_path / "etcd.db"))
        snapshot_status = subprocess.run(
            ["etcdctl", "snapshot", "status", str(tmp_path / "etcd.db"), "-w", "json"],
            capture_output=True, text=True, check=False, env={"ETCDCTL_API": "3"})
        rendered = f.admin("cluster", "render", spec["name"], "--fleet", "3,50")
        removal_from = time.time()
        with servers[0].locked() as cluster:  # w4 runs pods a budget protects
            cluster.add_replicaset("default", "web", 4, {"app": "web"}, nodes=["w4", "w4", "w3", "w2"])
            cluster.add_pdb("default", "web", {"app": "web"}, min_available=3)
            on_w4 = set(cluster.pods_on("w4"))
        f.admin("delete", "w4")
        f.wait_for("w4 reset and removed", lambda: "w4" not in {
            m["hostname"] for m in f.admin_json("machines")}, timeout=120)
        nodes_left = nodes_of(servers[0])
        with servers[0].locked() as cluster:
            evicted, least_healthy = list(cluster.evictions), cluster.min_healthy["default/web"]
        drained_at = next(e["time"] for e in f.events() if e["kind"] == "drain"
                          and e["message"].startswith("w4 drained"))
        managers_removed = managers_leave_within_quorum(f)
        members_left = etcd_names(f, "m2")

    # No machine was Ready before its Node: each left Deploy only after its Node turned Ready
    # (they register NotReady, and turn Ready once the CNI applied on m1 runs on them).
    assert sorted(ready_at) == sorted(MANAGERS + WORKERS)
    for host, when in ready_at.items():
        assert when >= plugins[0].ready_at[host], f"{host} Ready before its Node"
    first_worker_ready = min(ready_at[h] for h in WORKERS)
    assert ready_at["m1"] <= first_worker_ready

    # An etcd snapshot before each surviving manager's upgrade, kept by the coordinator (the
    # newest 3: the one before m1's removal went), each the real etcd's (etcdctl reads it)
    assert sorted((s["subject"], s["before"], s["release"]) for s in snapshots) == [
        (m, "upgrade", UPGRADE_TO) for m in ALL_MANAGERS[1:]]
    assert any("kept before m1's removal" in m for m in kept_events), kept_events
    assert "1 older deleted (settings.etcdSnapshots.keep)" in kept_events[-1]
    assert snapshot_status.returncode == 0, snapshot_status.stderr
    assert json.loads(snapshot_status.stdout)["totalKey"] > 0

    assert "phases.sh init /etc/kubernetes/nodeagent/init.yaml" in rendered
    assert "problem" not in rendered

    log = calls(log_path)
    kubeadm = [c for c in log if c.command == "kubeadm"]
    assert not [c for c in kubeadm if c.exit], "no kubeadm call failed"
    deploy, upgrade = ([c for c in log if c.start < upgrade_from],
                       [c for c in log if upgrade_from <= c.start < removal_from])

    # The control plane: one init, on the first manager; the CNI right after it, there.
    inits = list(workflow_runs(kubeadm, "init").values())
    assert [c.host for c in inits] == ["m1"]
    assert next(c.host for c in log if c.is_("kubectl", "apply")) == "m1"

    # Joins: each joiner once, with a token minted for it (kubeadm token create's description
    # names it); managers one at a time with a certificate key each, workers never with one.
    # m4 and w5 joined once m1 was gone, with the endpoint and CA hash the cluster kept.
    minted = {c.details["token"]: c for c in kubeadm if c.is_("kubeadm", "token", "create")}
    joins = workflow_runs(kubeadm, "join")
    assert sorted(joins) == sorted(JOINERS)
    assert len([c for c in kubeadm if c.is_("kubeadm", "join", "phase", "preflight")]) == len(joins)
    for host, join in joins.items():
        assert minted[join.details["token"]].details["description"] == f"nodeagent: {host}"
        assert minted[join.details["token"]].host in ALL_MANAGERS
        assert join.details["controlPlane"] is (host in ALL_MANAGERS)
        assert (join.details["certificateKey"] is not None) is (host in ALL_MANAGERS)
    assert {minted[joins[h].details["token"]].host for h in LATE} <= {"m2", "m3"}
    assert kept["outputs.control-plane.endpoint"] == "127.0.0.1:6444"  # the local proxy
    uploaded = [c.details["certificateKey"] for c in kubeadm  # the certkey items' (init's has --config)
                if c.is_("kubeadm", "init", "phase", "upload-certs") and "--config" not in c.argv]
    assert sorted(joins[h].details["certificateKey"] for h in ALL_MANAGERS[1:]) == sorted(uploaded)
    assert len(set(uploaded)) == 3
    manager_joins = sorted((joins[h] for h in ALL_MANAGERS[1:]), key=lambda c: c.start)
    assert all(a.end <= b.start for a, b in itertools.pairwise(manager_joins)), \
        "two managers joined at once"
    assert inits[0].end <= manager_joins[0].start
    assert most_at_once([joins[h] for h in WORKERS]) <= spec["settings"]["workerBatchSize"]
    assert min(joins[h].start for h in WORKERS) >= inits[0].end

    # Every token deleted once its joiner joined.
    assert tokens_left(log) == set()
    assert all(deletion.start >= joins[minted[token].details["description"].split(": ")[1]].end
               for deletion in kubeadm if deletion.is_("kubeadm", "token", "delete")
               for token in deletion.details["deleted"])

    # Every machine's Node, registered by its kubelet with the machine's mark, Ready.
    assert sorted(nodes) == sorted(MANAGERS + WORKERS)
    for host, machine in machines.items():
        node = nodes[host]
        assert node["metadata"]["labels"]["nodeagent.io/machine-id"] == machine["id"]
        assert node["spec"]["providerID"] == f"nodeagent://{spec['name']}/{machine['id']}"
        assert {"type": "Ready", "status": "True"}.items() <= node["status"]["conditions"][0].items()
        # Role labels are the coordinator's (a kubelet may not set them on itself).
        role = "control-plane" if host in MANAGERS else "worker"
        assert f"node-role.kubernetes.io/{role}" in node["metadata"]["labels"]
    for call in [*inits, *joins.values()]:
        assert call.details["labels"] == {"nodeagent.io/machine-id": everyone[call.host]["id"]}
        assert call.details["taints"] == []
    assert not [c for c in deploy if c.is_("kubeadm", "upgrade")]

    # No kubelet reaches the API through another machine: a worker's through its local proxy,
    # a manager's at its own API server (kubeadm's ControlPlaneKubeletLocalMode).
    assert kubelet_servers == {**dict.fromkeys(WORKERS, "https://127.0.0.1:6444"),
                               **{h: f"https://{machines[h]['ip']}:6443" for h in MANAGERS}}

    # The upgrade, with the first manager gone: the control plane first (kubeadm upgrade apply,
    # once, on the survivor that upgraded first: m2, which deployed first of them), then the
    # other managers one at a time (kubeadm upgrade node, which follows the cluster's version
    # and fails on nothing: only the order shows it), then the workers; each machine's kubelet
    # after its kubeadm step, and every kubelet at the new version.
    applies = [c for c in upgrade if c.is_("kubeadm", "upgrade", "apply")]
    assert [(c.host, c.details["version"]) for c in applies] == [("m2", UPGRADE_TO)]
    assert "runs upgrade/upgrade-control-plane (now: m2)" in planned, planned  # said before
    first_step = planned.splitlines()[1]
    assert first_step.startswith("step 1: m2 (manager, from 1.33.4) runs "), planned
    assert "upgrade/upgrade-kubeadm, upgrade/upgrade-control-plane," in first_step, planned
    node_upgrades = {c.host: c for c in upgrade if c.is_("kubeadm", "upgrade", "node")}
    assert sorted(node_upgrades) == sorted(set(SURVIVORS) - {"m2"})
    assert all(c.start >= applies[0].end for c in node_upgrades.values())
    assert {c.details["version"] for c in node_upgrades.values()} == {UPGRADE_TO}
    windows = sorted((window(upgrade, h), h) for h in ALL_MANAGERS[1:])
    # in the order they deployed: m2, then the others as they joined
    assert [h for _, h in windows] == [c.host for c in manager_joins]
    assert all(a[0][1] <= b[0][0] for a, b in itertools.pairwise(windows)), "managers overlapped"
    assert min(window(upgrade, h)[0] for h in SURVIVORS if h.startswith("w")) >= windows[-1][0][1]
    for host in SURVIVORS:
        restarts = [c for c in upgrade if c.host == host and c.is_("systemctl", "restart", "kubelet")]
        step = applies[0] if host == "m2" else node_upgrades[host]
        assert len(restarts) == 1 and restarts[0].start >= step.end
    assert kubelets == dict.fromkeys(SURVIVORS, UPGRADE_TO)

    # A deleted worker: its Node (found by its mark) gone, kubeadm reset, then what it leaves,
    # inside the agent's root only.
    assert sorted(nodes_left) == sorted(set(SURVIVORS) - {"w4"})
    # ... drained first through the Eviction API, within the budget, before its reset.
    assert on_w4 and on_w4 <= set(evicted), "w4's pods were not evicted"
    assert least_healthy >= 3, "the budget was broken"
    reset = next(c for c in kubeadm if c.is_("kubeadm", "reset") and c.host == "w4")
    assert drained_at <= reset.start, "w4 reset before its drain ended"
    assert managers_removed == ["m1", "m3"]
    # One real etcd member per manager, as a manager's etcd sees them; m1's and m3's removed
    # before their reset by a remaining manager (their leave item etcd-member-remove).
    assert members == sorted(MANAGERS)
    assert members_left == ["m2", "m4"]
    assert sorted(c.host for c in kubeadm if c.is_("kubeadm", "reset")) == ["m1", "m3", "w4"]
    # kube-proxy ran no IPVS there (no kube-ipvs0): IPVS, which the host may use, left alone.
    assert not any(c.is_("ipvsadm") for c in log)
    assert not (f.root("w4") / "etc/kubernetes").exists()
    assert (f.root("w4") / "etc/containerd/config.toml").exists()


def workflow_runs(kubeadm: list[Call], workflow: str) -> dict[str, Call]:
    """Per host, its `kubeadm init` or `join` as one call: the phases the profile runs one at a
    time (phases.sh, all with --config but init's wait-control-plane, unlike a certkey item's
    upload-certs), from the first one's start to the last one's end, their details merged."""
    runs: dict[str, Call] = {}
    for call in kubeadm:
        if call.is_("kubeadm", workflow, "phase") and (
                "--config" in call.argv or call.argv[2] == "wait-control-plane"):
            before = runs.get(call.host, call)
            runs[call.host] = replace(before, end=call.end, exit=before.exit or call.exit,
                                      details={**before.details, **call.details})
    return runs


def etcd_names(f: Fleet, via: str) -> list[str]:
    """The etcd members' names as the etcd of manager via sees them."""
    node = next(n for n in f.lan.nodes if n.hostname == via)
    return sorted(m["name"] for m in etcd_members(f.root(via), node.ns.argv([])))


def bare_host(root: Path) -> None:
    """A stock host: IPv4 forwarding off, br_netfilter not loaded (no net/bridge keys)."""
    passing_root(root, root.name)
    (root / "proc/sys/net/ipv4/ip_forward").write_text("0\n")
    shutil.rmtree(root / "proc/sys/net/bridge")


def prepared_on_a_bare_host(f: Fleet, tmp: Path) -> None:
    """m1 registered and was approved with forwarding off (to be set by Prepare, not a
    failure), its prepare items set it, and its prerequisites, checked again after Prepare,
    let it into Deploy; no agent ignores any precheck."""
    assert not [p for p in tmp.glob("*.yaml") if "ignorePrechecks" in p.read_text()]
    registered = next(e for e in f.events() if e["kind"] == "registered"
                      and e["hostname"] == "m1")
    # (the live process table is the test machine's: other tests' etcd may show as leftovers)
    assert not [f for f in registered["data"]["precheck_failures"]
                if f.startswith(("ip-forward", "bridge-netfilter"))], registered
    checked = [e["time"] for e in f.events() if e["kind"] == "precheck" and e["hostname"] == "m1"
               and e["message"] == "m1's Kubernetes prerequisites hold after Prepare"]
    deployed = next(e["time"] for e in f.events() if e["kind"] == "state"
                    and e["hostname"] == "m1" and e["data"].get("to") == "Deploy")
    assert checked and checked[0] <= deployed
    assert (f.root("m1") / "proc/sys/net/ipv4/ip_forward").read_text() == "1\n"
    for machine in f.admin_json("machines"):
        report = f.admin_json("machines", "get", machine["hostname"])["precheck"]
        assert report["prepared"] is not False, machine["hostname"]
        assert not [c["name"] for c in report["checks"] if c["ignored"]], machine["hostname"]


def tokens_left(log: list[Call]) -> set[str]:
    """The tokens kubeadm created and nobody deleted yet."""
    created = {c.details["token"] for c in log if c.is_("kubeadm", "token", "create")}
    return created - {t for c in log if c.is_("kubeadm", "token", "delete")
                      for t in c.details["deleted"]}


def nodes_of(server: KubeApiServer) -> dict[str, Any]:
    with server.locked() as cluster:
        return {name: dict(node) for name, node in cluster.nodes.items()}


def at_release(f: Fleet, release: str) -> bool:
    return all(m["state"] == "Ready" and m["release"] == release for m in f.admin_json("machines"))


def labelled_and_tainted(f: Fleet, server: KubeApiServer, profile: str, tmp: Path) -> None:
    """A machine's label reaches its Node and leaves it again; dedicatedManagers taints the
    managers' Nodes (and only theirs); labels set by others are left alone."""
    with server.locked() as cluster:
        cluster.nodes["w1"]["metadata"]["labels"]["team"] = "db"  # someone else's
    f.admin("machines", "label", "w1", "zone=eu-1a")
    f.wait_for("w1's Node labelled", lambda: nodes_of(server)["w1"]["metadata"]["labels"].get(
        "zone") == "eu-1a")
    f.admin("machines", "label", "w1", "zone-")
    f.wait_for("the label gone from w1's Node", lambda: "zone" not in nodes_of(server)["w1"][
        "metadata"]["labels"])
    assert nodes_of(server)["w1"]["metadata"]["labels"]["team"] == "db"
    dedicated = tmp / "dedicated.yaml"
    dedicated.write_text(profile.replace("dedicatedManagers: false", "dedicatedManagers: true"))
    f.admin("cluster", "apply", "-f", str(dedicated))

    def tainted() -> bool:
        nodes = nodes_of(server)
        return all(any(t == {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
                       for t in nodes[h]["spec"].get("taints") or []) for h in MANAGERS)

    f.wait_for("the managers' Nodes tainted NoSchedule", tainted)
    assert not any(nodes_of(server)[h]["spec"].get("taints") for h in WORKERS)


def first_manager_deleted_then_joiners(f: Fleet) -> dict[str, str]:
    """m1, the first manager (init ran there), deleted; then a manager and a worker join with
    the endpoint and CA hash the cluster kept (each manager produced them again), their join
    material minted on the managers left. Before, they waited for ever for m1's outputs. The
    cluster's public outputs once m1 was gone."""
    f.admin("delete", "m1", "--yes")
    f.wait_for("m1 reset and removed", lambda: "m1" not in {
        m["hostname"] for m in f.admin_json("machines")}, timeout=120)
    kept: dict[str, str] = f.admin_json("status", f.cluster)["outputs"]
    f.join("m4", "manager")
    f.join("w5")
    f.wait_for("m4 and w5 Ready", lambda: f.admin_json("status", f.cluster)["counts"] == {
        "Ready": len(JOINERS)}, timeout=150)  # m1 gone: every joiner
    return kept


def managers_leave_within_quorum(f: Fleet) -> list[str]:
    """m3 may go (two of three are a majority); m2 (the first manager now, so confirmed with
    --yes) may not while m3 is leaving (one at a time), nor once m3 is gone (one of two is no
    majority). The managers removed (m1 was before)."""
    f.admin("delete", "m3")
    refused = f.coordinator.cli("delete", "m2", "--yes", ok=False)
    assert refused.returncode != 0 and "m3" in refused.stderr + refused.stdout, refused
    f.wait_for("m3 reset and removed", lambda: "m3" not in {
        m["hostname"] for m in f.admin_json("machines")}, timeout=120)
    refused = f.coordinator.cli("delete", "m2", "--yes", ok=False)
    assert refused.returncode != 0 and "majority" in refused.stderr + refused.stdout, refused
    hosts = {m["hostname"]: m["state"] for m in f.admin_json("machines")}
    assert hosts["m2"] == "Ready" and hosts["m4"] == "Ready"
    return sorted(set(ALL_MANAGERS) - set(hosts))
