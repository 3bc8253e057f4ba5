"""A kill storm: 15 agents in network namespaces (3 managers, 12 workers) roll a cluster out and
then upgrade it to a second release while agents are killed -9 about every 0.6 s (mostly in
the middle of an item) and the coordinator about every 2.5 s. Afterwards, from the event
history and the files the nodes' non-idempotent items wrote: the ordering invariants held at
every state change; every item completed exactly once on every node (and each post-deploy
version once in the cluster), never two items at once on a node; the post-deploy step ran on
one manager at a time; the upgrade items of the release a machine deployed at never ran; every
machine is Ready at the final release and none is stuck.

The storm's seed is printed; NODEAGENT_STORM_SEED replays a storm's choices."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from tests.support.rollout import fleet
from tests.support.storm import (
    Storm,
    assert_one_at_a_time,
    assert_runs_sequential,
    completions,
    intervals,
    replay,
    runs,
    storm_item,
)

MANAGERS = ("m1", "m2", "m3")
WORKERS = tuple(f"w{n}" for n in range(1, 13))
BATCH = 3
MIN_AGENT_KILLS = 30
MIN_COORDINATOR_KILLS = 10


def role_items(role: str, release: int) -> str:
    """A role's items at a release: the deploy item changes at release 2, whose new upgrade
    item joins the one release 1 already had (which no machine that deployed at release 1
    may ever run)."""
    items = [
        storm_item(f"prep-{role}", "prepare", "1", f"prep-{role}.1", 1.0),
        storm_item(f"deploy-{role}", "deploy", str(release), f"deploy-{role}.{release}", 1.5),
        storm_item(f"reconf-{role}", "reconfigure", "1", f"reconf-{role}@${{managers}}", 0.3),
        storm_item(f"upgrade-a-{role}", "upgrade", "1", f"upgrade-a-{role}.1", 0.3),
    ]
    if release == 2:
        items.append(storm_item(f"upgrade-b-{role}", "upgrade", "2", f"upgrade-b-{role}.2", 0.5))
    if role == "manager":
        items.append(storm_item("addons", "postdeploy", str(release), f"addons.{release}", 1.5))
    return f"  {role}:\n" + "".join(items)


def storm_spec(release: int) -> str:
    return (f'name: lab\nrelease: "{release}"\nsettings:\n  workerBatchSize: {BATCH}\n'
            "  heartbeatTimeoutSeconds: 10\n  retry: {baseSeconds: 0.2, maxSeconds: 1}\n"
            "  drain: {enabled: false}\nmachineTypes:\n"
            + role_items("manager", release) + role_items("worker", release))


def test_a_kill_storm_during_a_rollout_and_an_upgrade_breaks_no_promise(tmp_path: Path) -> None:
    seed = int(os.environ.get("NODEAGENT_STORM_SEED", time.time_ns() % 1_000_000))
    print(f"storm seed {seed}")
    with fleet(tmp_path, managers=MANAGERS, workers=WORKERS, cluster_spec=storm_spec(1)) as f:
        storm = Storm(f, f.admin("join-token", "create", "lab").strip(), random.Random(seed))

        def settled(release: int) -> bool:
            machines = storm.admin_json("machines")
            return len(machines) == len(f.hostnames) and all(
                m["state"] == "Ready" and m["release"] == str(release) for m in machines) \
                and sum(completions(runs(f.root(m))).get(f"addons.{release}", 0)
                        for m in MANAGERS) >= 1

        with storm.running():
            f.wait_for("the rollout, in the storm", lambda: settled(1), timeout=300)
            rollout_kills = (storm.kills(), storm.coordinator_kills)
            (tmp_path / "release-2.yaml").write_text(storm_spec(2))
            storm.admin("cluster", "apply", "-f", str(tmp_path / "release-2.yaml"))
            f.wait_for("the upgrade, in the storm", lambda: settled(2), timeout=300)
        upgrade_kills = (storm.kills() - rollout_kills[0],
                         storm.coordinator_kills - rollout_kills[1])
        print(f"kills during the rollout (agents, coordinator): {rollout_kills}; "
              f"during the upgrade: {upgrade_kills}")
        f.wait_for("every machine Ready at release 2 after the storm", lambda: settled(2))
        ended = time.time()

        events = f.events()
        states = replay(events, MANAGERS, BATCH)
        for hostname in f.hostnames:
            assert states[hostname][:4] == ["Pending", "Prepare", "Deploy", "Ready"], \
                (hostname, states[hostname])
            assert "Upgrade" in states[hostname], (hostname, states[hostname])

        machines = {m["hostname"]: m for m in f.admin_json("machines")}
        deployed = [f.node(m).ip for m in MANAGERS]
        for hostname, machine in machines.items():
            assert machine["managers"] == deployed, f"{hostname} last applied {machine['managers']}"

        post_deploy: dict[str, int] = {}
        for hostname in f.hostnames:
            role = "manager" if hostname in MANAGERS else "worker"
            lines = runs(f.root(hostname))
            assert_runs_sequential(hostname, lines)
            done = completions(lines)
            for key in (f"prep-{role}.1", f"deploy-{role}.1", f"deploy-{role}.2",
                        f"upgrade-b-{role}.2"):
                assert done.get(key) == 1, f"{hostname}: {key} completed {done.get(key, 0)} times"
            assert not any(line.key.startswith("upgrade-a-") for line in lines), \
                f"{hostname} ran an upgrade item of the release it deployed at"
            reconfigured = {k: n for k, n in done.items() if k.startswith("reconf-")}
            assert all(n == 1 for n in reconfigured.values()), (hostname, reconfigured)
            for key, count in done.items():
                if key.startswith("addons."):
                    post_deploy[key] = post_deploy.get(key, 0) + count
        assert post_deploy == {"addons.1": 1, "addons.2": 1}, post_deploy
        assert_one_at_a_time("the post-deploy step", {
            m: intervals(runs(f.root(m)), "addons.", storm.agent_kills.get(m, []), ended)
            for m in MANAGERS})

        assert storm.kills() >= MIN_AGENT_KILLS and \
            storm.coordinator_kills >= MIN_COORDINATOR_KILLS, \
            f"only {storm.kills()} agent and {storm.coordinator_kills} coordinator kills"
        assert rollout_kills[0] > 0 and upgrade_kills[0] > 0 and upgrade_kills[1] > 0
