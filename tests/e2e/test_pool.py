"""The machine pool end to end, with real agents in network namespaces and a Kubernetes API on the
LAN (whose Nodes the machines' deploy items register, as a kubelet does): twelve machines
register into the pool; a spec claims three managers and five workers by selector, and its
status says what it cannot fill until a machine that fits registers; a worker whose agent is
killed and whose Node goes NotReady is replaced from the pool; two of five unhealthy at once
with maxUnhealthy 1 are left alone, said so; scaling the workers 5 -> 3 returns two machines,
reset and prechecked again, to the pool."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from tests.support.kubeapi import Cluster, KubeApiServer, kube_api_server
from tests.support.lan import HUB_IP, Lan
from tests.support.rollout import Fleet, fleet

POOL = [f"p{i:02}" for i in range(1, 13)]
LATE = "p13"
REGISTER_NODE = """\
import json, sys, urllib.error, urllib.request
url, name, machine = sys.argv[1:]
node = {"metadata": {"name": name, "labels": {"nodeagent.io/machine-id": machine}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
request = urllib.request.Request(url + "/api/v1/nodes", json.dumps(node).encode(),
                                 {"Content-Type": "application/json"}, method="POST")
try:
    urllib.request.urlopen(request, timeout=10)
except urllib.error.HTTPError as exc:
    if exc.code != 409:
        raise
"""
ITEMS = """\
  {role}:
    - {{name: base, phase: prepare, action: {{type: exec, argv: ["true"]}}}}
    - name: kubelet
      phase: deploy
      action: {{type: exec, argv: [python3, {script}, "{kube}", "${{machine.hostname}}",
                                  "${{machine.id}}"]}}
    - {{name: kubeadm-reset, phase: reset, action: {{type: exec, argv: ["true"]}}}}
"""
SPEC = """\
name: lab
release: "1.0"
settings:
  heartbeatTimeoutSeconds: 10
  retry: {{baseSeconds: 0.2, maxSeconds: 1}}
  kubernetes: {{kubeconfig: {kubeconfig}}}
  drain: {{timeoutSeconds: 30}}
  health: {{unhealthyAfterSeconds: 5, maxUnhealthy: 1}}
machineTypes:
{items}"""
CLAIMS = """\
pool:
  managers: {{count: 3, selector: {{labels: {{tier: control}}}}}}
  workers: {{count: {workers}, selector: {{labels: {{disk: ssd}}}}}}
"""


def pool_machines(f: Fleet) -> dict[str, dict[str, Any]]:
    return {m["hostname"]: m for m in f.admin_json("machines", "--pool")}


def members(f: Fleet) -> dict[str, dict[str, Any]]:
    return {m["hostname"]: m for m in f.admin_json("machines", "--cluster", "lab")}


def status(f: Fleet) -> dict[str, Any]:
    return f.admin_json("status", "lab")


def kinds_of(f: Fleet, hostname: str) -> list[str]:
    out = f.admin("events", "--machine", hostname, "--output", "json")
    return [json.loads(line)["kind"] for line in out.splitlines() if line.strip()]


def test_a_pool_of_twelve_claimed_by_selector_healed_and_scaled_down(tmp_path: Path) -> None:
    servers: list[KubeApiServer] = []

    def kube_on_the_lan(network: Lan, stack: contextlib.ExitStack) -> dict[str, str]:
        servers.append(stack.enter_context(kube_api_server(Cluster(), netns=network.hub.name,
                                                           host=HUB_IP)))
        return {}

    script = tmp_path / "register-node.py"
    script.write_text(REGISTER_NODE)
    kubeconfig = tmp_path / "kubeconfig"
    holder: dict[str, str] = {}

    def spec(claims: str = "") -> str:
        items = "".join(ITEMS.format(role=r, script=script, kube=holder["url"])
                        for r in ("manager", "worker"))
        return SPEC.format(kubeconfig=kubeconfig, items=items) + claims

    # The spec needs the API's URL, known once the LAN is up: the fleet starts with a
    # placeholder spec that claims nothing, and the test applies the real one.
    placeholder = "name: lab\nrelease: \"0\"\nmachineTypes: {}\n"
    with fleet(tmp_path, managers=(), workers=POOL, late=(LATE,), cluster_spec=placeholder,
               agent_env=kube_on_the_lan, pool=True) as f:
        server = servers[0]
        holder["url"] = server.url
        server.write_kubeconfig(kubeconfig)
        f.wait_for("12 machines available in the pool", lambda: [
            m["state"] for m in pool_machines(f).values()] == ["Uninitialized"] * 12)
        for hostname in POOL[:3]:
            f.admin("machines", "label", hostname, "tier=control")
        for hostname in POOL[3:7]:
            f.admin("machines", "label", hostname, "disk=ssd")
        claiming = tmp_path / "claiming.yaml"
        claiming.write_text(spec(CLAIMS.format(workers=5)))
        f.admin("cluster", "apply", "-f", str(claiming))

        # Four of the five workers it asks for fit: it says what it cannot fill, and why.
        f.wait_for("the claims", lambda: len(members(f)) == 7)
        notes = status(f)["pool"]["notes"]
        assert notes == ["needs 5 workers with label disk=ssd; has 4, and the pool has no more "
                         "that fit (5 lack label disk=ssd)"]
        assert sorted(m["claim"] for m in members(f).values()) == [
            "manager-0", "manager-1", "manager-2", "worker-0", "worker-1", "worker-2",
            "worker-3"]
        shown = f.admin("status", "lab")
        assert "needs 5 workers with label disk=ssd" in shown

        # A machine that fits registers: claimed at once, into the free place.
        f.start_agent(LATE, f.join_string)
        f.wait_for(f"{LATE} in the pool", lambda: LATE in pool_machines(f))
        f.admin("machines", "label", LATE, "disk=ssd")
        f.wait_for(f"{LATE} claimed", lambda: members(f).get(LATE, {}).get("claim") == "worker-4")
        f.wait_for("eight Ready", lambda: status(f)["counts"] == {"Ready": 8}, timeout=150)
        assert status(f)["pool"]["notes"] == []
        assert sorted(server.cluster.nodes) == sorted(members(f))

        # A worker's agent is killed and its Node goes NotReady: after unhealthyAfterSeconds
        # it is replaced by the one spare that fits (labelled now), and removed without reset.
        f.admin("machines", "label", POOL[7], "disk=ssd")
        sick = next(h for h, m in members(f).items() if m["claim"] == "worker-0")
        f.kill_node(sick)
        with server.locked() as cluster:
            cluster.set_node_ready(sick, False)
        f.wait_for(f"{sick} replaced", lambda: sick not in members(f)
                   and POOL[7] in members(f), timeout=120)
        assert members(f)[POOL[7]]["claim"] == "worker-5"
        assert "remediated" in kinds_of(f, sick)
        f.wait_for("eight Ready again", lambda: status(f)["counts"] == {"Ready": 8}, timeout=120)
        assert sick not in server.cluster.nodes

        # Two of five unhealthy at once, maxUnhealthy 1: neither is remediated, and the status
        # says why.
        two = [h for h, m in members(f).items() if m["role"] == "worker"][:2]
        for hostname in two:
            f.kill_node(hostname)
            with server.locked() as cluster:
                cluster.set_node_ready(hostname, False)
        f.wait_for("the circuit breaker", lambda: any(
            n.startswith("2 machines unhealthy") for n in status(f)["pool"]["notes"]),
            timeout=60)
        time.sleep(12)  # a recheck of the claims (every 10 s) later: still nothing done
        assert all(members(f)[h]["state"] == "Ready" for h in two)
        assert not any("remediated" in kinds_of(f, h) for h in two)
        plan = f.admin("machines", "remediate", "--dry-run", "--cluster", "lab")
        assert "more than health.maxUnhealthy (1): none is remediated" in plan

        # Back (agents restarted, Nodes Ready), then five workers down to three: the two
        # highest places go back to the pool, reset, and are available once prechecked again.
        for hostname in two:
            f.start_agent(hostname, f.join_string)
            with server.locked() as cluster:
                cluster.set_node_ready(hostname, True)
        f.wait_for("every member answers", lambda: all(
            m["responding"] for m in members(f).values()) and not status(f)["pool"]["notes"])
        scaled = tmp_path / "scaled.yaml"
        scaled.write_text(spec(CLAIMS.format(workers=3)))
        highest = sorted((m for m in members(f).values() if m["role"] == "worker"),
                         key=lambda m: int(m["claim"].rsplit("-", 1)[1]))[-2:]
        f.admin("cluster", "apply", "-f", str(scaled))
        for m in highest:
            f.wait_for(f"{m['hostname']} back in the pool", lambda h=m["hostname"]:
                       pool_machines(f).get(h, {}).get("state") == "Uninitialized", timeout=90)
            kinds = kinds_of(f, m["hostname"])
            assert kinds.index("released") < kinds.index("returned") < len(kinds) - 1
            assert m["hostname"] not in server.cluster.nodes  # drained and its Node deleted
        assert status(f)["counts"] == {"Ready": 6}
        assert [(r["role"], r["held"]) for r in status(f)["pool"]["roles"]] == [
            ("manager", 3), ("worker", 3)]
