"""A kill storm: 15 agents in network namespaces (3 managers, 12 workers) roll a cluster out and
then upgrade it, release after release (at least one) until the storm has killed agents 20
times and the coordinator 10 times, while agents are killed -9 one at a time, each about 0.7 s
after the last one is back (mostly in the middle of an item), and meanwhile the coordinator each
time it has been back about two seconds (at least as long as its restart took) and
recorded a state change (tests/support/storm.py says why). Afterwards, from the event
history and the files the nodes' non-idempotent items wrote: the ordering invariants held at
every state change; every item completed exactly once on every node (a run killed between its
command's exit and its journal record excepted, as docs/agent.md says: its rerun counts) and
each post-deploy version once in the cluster; never two items at once on a node; the
post-deploy step ran on one manager at a time; the upgrade items of the release a machine
deployed at never ran; every machine is Ready at the final release with the final manager set,
and none is stuck.

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
MIN_AGENT_KILLS = 20
MIN_COORDINATOR_KILLS = 10
MAX_RELEASE = 5


def role_items(role: str, release: int) -> str:
    """A role's items at a release: the deploy item and the second upgrade item change at
    every release; the first upgrade item is release 1's, which no machine (all deployed at
    release 1) may ever run."""
    items = [
        storm_item(f"prep-{role}", "prepare", "1", f"prep-{role}.1", 1.0),
        storm_item(f"deploy-{role}", "deploy", str(release), f"deploy-{role}.{release}", 1.0),
        storm_item(f"reconf-{role}", "reconfigure", "1", f"reconf-{role}@${{managers}}", 0.3),
        storm_item(f"upgrade-a-{role}", "upgrade", "1", f"upgrade-a-{role}.1", 0.3),
    ]
    if release > 1:
        items.append(storm_item(f"upgrade-b-{role}", "upgrade", str(release),
                                f"upgrade-b-{role}.{release}", 0.5))
    if role == "manager":
        items.append(storm_item("addons", "postdeploy", str(release), f"addons.{release}", 1.5))
    return f"  {role}:\n" + "".join(items)


def storm_spec(release: int) -> str:
    return (f'name: lab\nrelease: "{release}"\nsettings:\n  workerBatchSize: {BATCH}\n'
            "  heartbeatTimeoutSeconds: 10\n  retry: {baseSeconds: 0.2, maxSeconds: 1}\n"
            "  drain: {enabled: false}\nmachineTypes:\n"
            + role_items("manager", release) + role_items("worker", release))


def test_a_kill_storm_during_a_rollout_and_upgrades_breaks_no_promise(tmp_path: Path) -> None:
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

        release = 1
        with storm.running():
            f.wait_for("the rollout, in the storm", lambda: settled(1), timeout=300)
            print(f"kills during the rollout (agents, coordinator): "
                  f"{storm.kills()}, {storm.coordinator_kills}")
            # Upgrades, one release after another, at least one (a rollout that took every
            # kill it needs checks no upgrade promise) and until the storm has killed enough.
            while release == 1 or storm.kills() < MIN_AGENT_KILLS \
                    or storm.coordinator_kills < MIN_COORDINATOR_KILLS:
                assert release < MAX_RELEASE, "the storm is too slow to reach its kills"
                release += 1
                (tmp_path / f"release-{release}.yaml").write_text(storm_spec(release))
                storm.admin("cluster", "apply", "-f", str(tmp_path / f"release-{release}.yaml"))
                f.wait_for(f"the upgrade to {release}, in the storm", lambda r=release: settled(r),
                           timeout=300)
                print(f"kills up to release {release}: {storm.kills()}, {storm.coordinator_kills}")
        f.wait_for(f"every machine Ready at release {release} after the storm",
                   lambda: settled(release))
        ended = time.time()

        events = f.events()
        states = replay(events, MANAGERS, BATCH)
        for hostname in f.hostnames:
            assert states[hostname][:4] == ["Pending", "Prepare", "Deploy", "Ready"], \
                (hostname, states[hostname])
            assert states[hostname].count("Upgrade") == release - 1, (hostname, states[hostname])

        machines = {m["hostname"]: m for m in f.admin_json("machines")}
        deployed = [f.node(m).ip for m in MANAGERS]
        for hostname, machine in machines.items():
            assert machine["managers"] == deployed, f"{hostname} last applied {machine['managers']}"

        post_deploy: dict[str, int] = {}
        for hostname in f.hostnames:
            role = "manager" if hostname in MANAGERS else "worker"
            lines = runs(f.root(hostname))
            assert_runs_sequential(hostname, lines)
            kills = storm.agent_kills.get(hostname, [])
            done = completions(lines, kills)
            expected = [f"prep-{role}.1", *(f"deploy-{role}.{r}" for r in range(1, release + 1)),
                        *(f"upgrade-b-{role}.{r}" for r in range(2, release + 1))]
            for key in expected:
                assert done.get(key) == 1, \
                    f"{hostname}: {key} completed {done.get(key, 0)} times (runs {lines}, kills {kills})"
            assert not any(line.key.startswith("upgrade-a-") for line in lines), \
                f"{hostname} ran an upgrade item of the release it deployed at"
            reconfigured = {k: n for k, n in done.items() if k.startswith("reconf-")}
            assert all(n == 1 for n in reconfigured.values()), (hostname, reconfigured)
            for key, count in done.items():
                if key.startswith("addons."):
                    post_deploy[key] = post_deploy.get(key, 0) + count
        assert post_deploy == {f"addons.{r}": 1 for r in range(1, release + 1)}, post_deploy
        assert_one_at_a_time("the post-deploy step", {
            m: intervals(runs(f.root(m)), "addons.", storm.agent_kills.get(m, []), ended)
            for m in MANAGERS})
