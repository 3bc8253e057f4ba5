"""Releases on real agents in network namespaces: the 8-machine fleet of test_rollout is
upgraded to 1.1 (an upgrade item per role); a worker joins at 1.1; then 1.2 keeps 1.1's
upgrade items beside its own and changes the workers' deploy item. The worker that joined at
1.1 never runs 1.1's upgrade item; every worker, Ready for a long time, runs the changed
deploy item, then 1.2's upgrade item; the dry run listed exactly that, and the item logs and
events say so. Drains are off here: test_upgrade drains every node."""

from __future__ import annotations

from pathlib import Path

from tests.support.rollout import MANAGERS, WORKERS, Fleet, fleet, item_log, spec

LATE = "w6"
# An upgrade item written for release {release}, per {role}: it logs its name like the others.
UPGRADE_ITEM = """\
    - name: upgrade-{{role}}-{release}
      phase: upgrade
      version: "{release}"
      action:
        type: exec
        argv: [sh, -c, 'echo "$1" >> var/log/items.log', sh, upgrade-{{role}}-{release}]
"""


def release(version: str, upgrades: list[str], new_join: bool = False) -> str:
    """The cluster at release version, with an upgrade item per role for each of upgrades;
    new_join: the workers' deploy item changed (it logs deploy-worker-v2)."""
    text = spec("".join(UPGRADE_ITEM.format(release=r) for r in upgrades))
    text = text.replace('release: "1.0"', f'release: "{version}"').replace(
        "settings:\n", "settings:\n  drain: {enabled: false}\n", 1)
    return text.replace("sh, deploy-worker]", "sh, deploy-worker-v2]") if new_join else text


def apply(f: Fleet, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "next.yaml"
    path.write_text(text)
    f.admin("cluster", "apply", "-f", str(path))
    return path


def ready_at(f: Fleet, version: str, count: int) -> bool:
    machines = f.admin_json("machines")
    return len(machines) == count and all(
        m["state"] == "Ready" and m["release"] == version for m in machines)


def test_a_worker_that_joined_at_a_release_skips_its_upgrade_and_changed_items_reach_ready_ones(
        tmp_path: Path) -> None:
    with fleet(tmp_path, late=(LATE,)) as f:
        f.wait_for("every machine Ready", lambda: ready_at(f, "1.0", 8))
        apply(f, tmp_path, release("1.1", ["1.1"]))
        f.wait_for("every machine at 1.1", lambda: ready_at(f, "1.1", 8), timeout=180)
        f.join(LATE)
        f.wait_for(f"{LATE} Ready at 1.1", lambda: ready_at(f, "1.1", 9))
        assert item_log(f, LATE) == ["prepare-worker", "deploy-worker"]

        (tmp_path / "v12.yaml").write_text(release("1.2", ["1.1", "1.2"], new_join=True))
        plan = f.admin_json("upgrade", "plan", "lab", "-f", str(tmp_path / "v12.yaml"))
        runs = {m["hostname"]: [f"{i['phase']}/{i['name']}" for i in m["items"]]
                for step in plan["steps"] for m in step}
        assert runs == {**{m: ["upgrade/upgrade-manager-1.2"] for m in MANAGERS},
                        **{w: ["deploy/deploy-worker", "upgrade/upgrade-worker-1.2"]
                           for w in [*WORKERS, LATE]}}
        apply(f, tmp_path, (tmp_path / "v12.yaml").read_text())
        f.wait_for("every machine at 1.2", lambda: ready_at(f, "1.2", 9), timeout=180)

        assert item_log(f, LATE) == ["prepare-worker", "deploy-worker", "deploy-worker-v2",
                                     "upgrade-worker-1.2"], "it ran 1.1's upgrade item"
        for worker in WORKERS:
            assert item_log(f, worker) == ["prepare-worker", "deploy-worker", "upgrade-worker-1.1",
                                           "deploy-worker-v2", "upgrade-worker-1.2"], worker
        for manager in MANAGERS:
            assert item_log(f, manager) == ["prepare-manager", "deploy-manager",
                                            "upgrade-manager-1.1", "upgrade-manager-1.2"], manager
        assert "deploy item deploy-worker succeeded (attempt 1) in the upgrade" in [
            e["message"] for e in f.events() if e["hostname"] == LATE and e["kind"] == "item"]
        assert f"{LATE} deploy/deploy-worker (in the upgrade) attempt 1 succeeded" in f.admin(
            "machines", "logs", LATE)
