"""The 8-agent cluster of test_rollout (3 managers, 5 workers), rolled out, then upgraded to a
new release while workloads run on a test Kubernetes API server: pods of a ReplicaSet under a
PodDisruptionBudget of minAvailable 2 spread over the workers, another ReplicaSet, and a
DaemonSet everywhere. Every node is upgraded; the budget is never violated at any moment; no
more than the batch size of workers is cordoned at once; all end uncordoned and Ready; then
the post-deploy step runs once, on a manager, and its installed version is verified."""

from __future__ import annotations

from pathlib import Path

from tests.support.kubeapi import Cluster, kube_api_server
from tests.support.rollout import BATCH, MANAGERS, WORKERS, all_ready, fleet, item_log, spec

UPGRADE_ITEMS = """\
    - name: upgrade-{role}
      phase: upgrade
      version: "2.0"
      action:
        type: exec
        argv: [sh, -c, 'echo "$1" >> var/log/items.log', sh, upgrade-{role}]
    - name: helm-controller
      phase: postdeploy
      version: "0.15.0"
      versionCommand: [cat, var/log/helm-controller.version]
      action:
        type: exec
        argv: [sh, -c, 'echo "$1" >> var/log/items.log; echo 0.15.0 > var/log/helm-controller.version',
               sh, postdeploy]
"""


def workload() -> Cluster:
    cluster = Cluster(ready_delay=0.5, termination_delay=0.2)
    for node in MANAGERS + WORKERS:
        cluster.add_node(node)
    cluster.add_daemonset("kube-system", "node-exporter", {"app": "node-exporter"})
    cluster.add_replicaset("default", "web", 3, {"app": "web"}, nodes=WORKERS[:3])
    cluster.add_replicaset("default", "api", 5, {"app": "api"}, nodes=WORKERS)
    cluster.add_pdb("default", "web", {"app": "web"}, min_available=2)
    return cluster


def release_2(kubeconfig: Path) -> str:
    return spec(UPGRADE_ITEMS).replace('release: "1.0"', 'release: "2.0"').replace(
        "settings:\n", "settings:\n"
        f"  kubernetes: {{kubeconfig: {kubeconfig}}}\n"
        "  drain: {timeoutSeconds: 60, evictionRetrySeconds: 0.2, gracePeriodSeconds: 1}\n", 1)


def test_an_upgrade_drains_every_node_within_its_budget_and_batch(tmp_path: Path) -> None:
    with fleet(tmp_path) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f))
        with kube_api_server(workload(), netns=f.lan.hub.name) as kube:
            kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
            with kube.locked() as cluster:  # each node as its machine's kubelet marks it
                for m in f.admin_json("machines"):
                    cluster.mark_node(m["hostname"], m["id"])
            pods_to_move = {n: len(kube.cluster.pods_on(n)) - 1 for n in WORKERS}  # less DaemonSet
            (tmp_path / "v2.yaml").write_text(release_2(kubeconfig))
            plan = f.admin_json("upgrade", "plan", "lab", "-f", str(tmp_path / "v2.yaml"))
            steps = [[m["hostname"] for m in step] for step in plan["steps"]]
            # managers one at a time (in registration order), then workers in batches of 2
            assert sorted(steps[:3]) == [["m1"], ["m2"], ["m3"]]
            assert [len(s) for s in steps[3:]] == [2, 2, 1]
            f.admin("cluster", "apply", "-f", str(tmp_path / "v2.yaml"))

            def upgraded() -> bool:
                machines = f.admin_json("machines")
                return all(m["state"] == "Ready" and m["release"] == "2.0" for m in machines)

            f.wait_for("every machine upgraded", upgraded, timeout=180)
            f.wait_for("the post-deploy step", lambda: any(
                "postdeploy" in item_log(f, m) for m in MANAGERS))
            with kube.locked() as cluster:
                assert cluster.cordoned() == [], "a node was left cordoned"
                assert cluster.min_healthy["default/web"] >= 2, "the budget was violated"
                assert cluster.max_cordoned <= BATCH, f"{cluster.max_cordoned} nodes cordoned at once"
                evicted_from = sum(pods_to_move.values())
                assert len(cluster.evictions) >= evicted_from, "a worker was not drained"
                assert all(len(cluster.pods_on(n)) >= 1 for n in WORKERS)  # DaemonSet pods stay
                assert all(c["type"] == "Ready" and c["status"] == "True"
                           for node in cluster.nodes.values() for c in node["status"]["conditions"])
        assert all_ready(f)
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname)[:3] == [f"prepare-{role}", f"deploy-{role}",
                                                 f"upgrade-{role}"], hostname
        assert sum(item_log(f, m).count("postdeploy") for m in MANAGERS) == 1
        events = f.events()
        assert [e["message"].split(" on ")[0] for e in events if e["kind"] == "post-deploy"
                and e["data"].get("verified")] == ["post-deploy step verified"]
        upgrades = [e for e in events if e["kind"] == "state" and e["data"]["to"] == "Upgrade"]
        # managers first, one at a time, then workers: in the order the dry run showed
        assert [e["hostname"] for e in upgrades] == [h for step in steps for h in step]
        drains = [e for e in events if e["kind"] == "drain" and "drained" in e["message"]]
        assert {e["hostname"] for e in drains} == set(MANAGERS + WORKERS)
