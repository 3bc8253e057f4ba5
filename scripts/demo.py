"""The main job on one machine: a coordinator on its embedded SQLite store and several local
agents (each with its own hostname and its own node root) rolling out examples/cluster.yaml
until every machine is Ready.

Node roots are sandboxes: /proc, /sys and /usr are the host's (so prechecks read the real
kernel), while /etc, /var and /run are the node's own, so no item touches the host.
Needs root (unshare --uts gives every agent its own hostname).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

from coordinator.cli.client import ClientError
from coordinator.cli.formatting import machines_table
from tests.support.harness import ServedCoordinator
from tests.support.ports import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NODES = [("cp-1", "manager"), ("cp-2", "manager"), ("node-1", "worker"), ("node-2", "worker"),
         ("node-3", "worker")]


def node_root(base: Path, hostname: str) -> Path:
    root = base / hostname
    for shared in ("proc", "sys", "usr", "bin", "sbin", "lib", "lib64"):
        if Path(f"/{shared}").exists():
            (root / shared).parent.mkdir(parents=True, exist_ok=True)
            (root / shared).symlink_to(f"/{shared}")
    etc = root / "etc"
    etc.mkdir(parents=True)
    for name in ("os-release", "resolv.conf"):
        if Path(f"/etc/{name}").exists():
            shutil.copy(Path(f"/etc/{name}").resolve(), etc / name)
    (etc / "hostname").write_text(hostname + "\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n")
    for own in ("var/lib", "var/log", "run"):
        (root / own).mkdir(parents=True)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description="Roll a sample cluster out on local agents.")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("demo: run as root (each agent gets its own hostname via unshare --uts)")
    base = Path(tempfile.mkdtemp(prefix="nodeagent-demo-"))
    coordinator = ServedCoordinator(f"https://127.0.0.1:{free_port()}", base / "data",
                                    base / "coordinator.log")
    procs: list[subprocess.Popen[bytes]] = []
    finished = False
    try:
        print(f"== demo directory {base} (removed at the end unless --keep or a failure)")
        print("== coordinator init: CA, server certificate and admin token in its data/")
        coordinator.init()
        print(f"== coordinator on {coordinator.url} (TLS), SQLite store in data/")
        coordinator.start()
        admin = coordinator.admin
        spec = (REPO / "examples" / "cluster.yaml").read_text()
        applied = admin.request("PUT", "/v1/clusters", text=spec, content_type="application/yaml")
        print(f"== cluster {applied['name']} applied: release {applied['release']}")
        join = admin.request("POST", f"/v1/clusters/{applied['name']}/join-tokens",
                             body={"ttl": "1h", "maxUses": len(NODES)})["join"]
        print("== join string (URL, token and the CA's hash, which each agent checks): "
              f"{join[:40]}...")

        print("== prechecks of this host (what every simulated node sees of the kernel):")
        probe = node_root(base / "roots", "probe")
        # --prepared: as after Prepare, whose items here set none of Kubernetes' prerequisites
        checked = subprocess.run([str(BIN / "nodeagent"), "precheck", "--root", str(probe),
                                  "--output", "json", "--prepared"], capture_output=True,
                                 text=True, check=False)
        report = json.loads(checked.stdout)
        failing = [c["name"] for c in report["checks"]
                   if c["status"] == "fail" and c["name"] != "hostname"]
        for check in report["checks"]:
            print(f"   {check['name']:<22} {check['status']:<5} {check['message']}")
        if failing:
            print(f"== demo: this host fails {', '.join(failing)}; the simulated nodes ignore "
                  "those (a real node would stay unapprovable until they are fixed)")
        # The simulated nodes share this host's network interfaces, so their MACs are one
        # machine's: the coordinator would hold each but the first as a clone.
        failing.append("machine-identity")
        for hostname, _role in NODES:
            root = node_root(base / "roots", hostname)
            config = base / f"{hostname}.yaml"
            config.write_text(json.dumps({
                "join": join, "coordinator": {"timeout": 5},
                "stateDir": str(root / "var/lib/nodeagent"), "heartbeatSeconds": 2,
                "ignorePrechecks": failing,
            }))
            procs.append(subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname,
                 str(BIN / "nodeagent"), "run", "--config", str(config), "--root", str(root)],
                stdout=(base / f"{hostname}.log").open("wb"), stderr=subprocess.STDOUT))
        roles = dict(NODES)

        def approve_ready_ones() -> bool:
            """Approve each machine once it registered with passing prechecks (a node whose
            checks failed, e.g. on a busy host, re-runs them and reports again)."""
            for machine in admin.all_machines():
                if not machine["approved"] and not machine["precheck_failures"]:
                    role = roles[machine["hostname"]]
                    admin.request("POST", f"/v1/machines/{machine['id']}/approve",
                                  body={"role": role})
                    print(f"== approved {machine['hostname']} as {role}")
            return all(m["approved"] for m in admin.all_machines()) and len(
                admin.all_machines()) == len(NODES)

        wait_until(approve_ready_ones, 120, "every agent registered with passing prechecks",
                   interval=0.2, ignoring=(ClientError,))
        shown = [""]

        def all_ready() -> bool:
            """Print the machines table whenever it changed; True once every machine is Ready."""
            status = admin.get(f"/v1/clusters/{applied['name']}/status")
            table = "\n".join(machines_table(status["machines"]))
            if table != shown[0]:
                counts = ", ".join(f"{n} {s}" for s, n in sorted(status["counts"].items()))
                print(f"\n-- {time.strftime('%H:%M:%S')}  {counts}\n{table}", flush=True)
                shown[0] = table
            return bool(status["counts"] == {"Ready": len(NODES)})

        wait_until(all_ready, 180, "the rollout", interval=0.5)
        print("\n== rollout order (from the event history):")
        for event in admin.get(f"/v1/events?cluster={applied['name']}"):
            if event["kind"] == "state":
                print(f"   {event['message']}")
        print(f"\n== all {len(NODES)} machines Ready. Items wrote in each node's root, e.g. "
              "node-1's /etc/demo/node.env:")
        print((base / "roots" / "node-1" / "etc" / "demo" / "node.env").read_text())
        finished = True
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        coordinator.stop()
        print(kept_or_removed(base, args.keep or not finished), flush=True)


def kept_or_removed(base: Path, keep: bool) -> str:
    """The last word on the demo's directory, said after it is kept or removed: a path is
    never shown as something to look at once it is gone. A failed run keeps it (its logs say
    why)."""
    if keep:
        return (f"== kept {base}: coordinator.log, each node's log (cp-1.log...), the node roots "
                "(roots/), the coordinator's data (data/)")
    shutil.rmtree(base, ignore_errors=True)
    return f"== removed {base} (--keep keeps it: the logs, the node roots, the data)"


if __name__ == "__main__":
    main()
