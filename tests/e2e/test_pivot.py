"""A Ready cluster of 8 agents, each in its own network namespace, pivoted from coordinator A
to B and then from B to C, each pivot killed at every step by a kill -9 of the old or the new
coordinator chosen at random (at a random moment after the step began) and run again; in the
end every agent on C with its identity and journal, no item run twice, A and B read-only and
in step with C, the event history keeping the ordering invariants, and an upgrade applied to C
reaching every agent. It prints its seed: NODEAGENT_PIVOT_SEED replays the choices."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import yaml

from tests.support.harness import ServedCoordinator
from tests.support.lan import HUB_IP
from tests.support.pivoting import STEPS, interrupted, pivot_argv
from tests.support.ports import free_port
from tests.support.rollout import Fleet, all_ready, assert_ordering_held, fleet, item_log, spec

REFRESH = ("--pivot-refresh", "2")
UPGRADE_ITEM = """\
    - name: upgrade-{role}
      phase: upgrade
      action:
        type: exec
        argv: [sh, -c, 'echo "$1" >> var/log/items.log', sh, upgrade-{role}]
"""


def target(f: Fleet, tmp: Path, name: str) -> tuple[ServedCoordinator, str]:
    """An empty coordinator in the hub namespace, and the URL agents reach it at."""
    port = free_port()
    url = f"https://{HUB_IP}:{port}"
    served = ServedCoordinator(f"https://127.0.0.1:{port}", tmp / name, tmp / f"{name}.log",
                               ("--advertise-url", url, *REFRESH), tuple(f.lan.hub.argv([])),
                               listen="0.0.0.0")
    served.init("--name", HUB_IP, "--advertise-url", url)
    served.start()
    return served, url


def machines(served: ServedCoordinator) -> list[dict]:  # type: ignore[type-arg]
    return served.cli_json("machines")  # type: ignore[no-any-return]


def journals(f: Fleet) -> dict[str, list[str]]:
    """The items each node ran, in order (each appends its name once per run)."""
    return {hostname: item_log(f, hostname) for hostname in f.hostnames}


def ran(f: Fleet, *phases: str) -> dict[str, list[str]]:
    """What journals() says when each node ran its role's item of each phase once."""
    return {hostname: [f"{phase}-{'manager' if hostname in f.managers else 'worker'}"
                       for phase in phases] for hostname in f.hostnames}


def test_agents_follow_two_pivots_killed_at_random_and_an_upgrade_from_the_last(
        tmp_path: Path) -> None:
    seed = int(os.environ.get("NODEAGENT_PIVOT_SEED", random.randrange(2**32)))
    print(f"NODEAGENT_PIVOT_SEED={seed}")
    rng = random.Random(seed)
    cluster = yaml.safe_load(spec())
    cluster["settings"]["drain"] = {"enabled": False}  # no Kubernetes here
    with fleet(tmp_path, cluster_spec=yaml.safe_dump(cluster), serve_args=REFRESH) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f))
        first = f.replicas[0]
        identities = {m["hostname"]: m["id"] for m in machines(first)}
        chain = [first]
        try:
            for name in ("b", "c"):
                old = chain[-1]
                new, url = target(f, tmp_path, name)
                chain.append(new)
                since = time.time()
                for _ in STEPS:  # as many kills as steps, wherever each lands
                    pivoted = old.cli_json("pivot", "status")["pivot"]
                    if pivoted is not None and pivoted["step"] == "done":
                        break  # a kill landed after the last step
                    victim = rng.choice([old, new])
                    interrupted(pivot_argv(old, new, url), None, victim, rng.uniform(0, 0.5))
                done = subprocess.run(pivot_argv(old, new, url), capture_output=True, text=True,
                                      timeout=300, check=False)
                assert done.returncode == 0 and "done: " in done.stdout, done
                f.wait_for(f"every agent on {name}", lambda n=new, s=since: all(
                    m["last_seen"] >= s for m in machines(n)))
                refused = old.cli("join-token", "create", "lab", ok=False)
                assert refused.returncode == 1 and f"moved to {url}" in refused.stderr
            last = chain[-1]
            assert {m["hostname"]: m["id"] for m in machines(last)} == identities
            assert journals(f) == ran(f, "prepare", "deploy")

            # The rollout's history came along both pivots, and kept the ordering invariants.
            assert_ordering_held([yaml.safe_load(line) for line in last.cli(
                "events", "--cluster", "lab", "--output", "json").stdout.splitlines() if line])

            cluster["release"] = "2.0"
            for role in ("manager", "worker"):
                cluster["machineTypes"][role] += yaml.safe_load(UPGRADE_ITEM.format(role=role))
            (tmp_path / "upgrade.yaml").write_text(yaml.safe_dump(cluster))
            last.cli("cluster", "apply", "-f", str(tmp_path / "upgrade.yaml"))
            f.wait_for("the upgrade from the last coordinator", lambda: all(
                m["state"] == "Ready" and m["release"] == "2.0" for m in machines(last)),
                timeout=180)
            assert journals(f) == ran(f, "prepare", "deploy", "upgrade")
            for copy in chain[:-1]:  # read-only copies, in step with the last one
                f.wait_for("the copies refreshed", lambda c=copy: all(
                    m["release"] == "2.0" for m in machines(c)), timeout=60)
        finally:
            for served in chain[1:]:
                served.stop()
