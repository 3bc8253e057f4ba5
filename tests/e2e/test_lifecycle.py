"""A machine's lifecycle on real agents in network namespaces: deleted, it runs its reset items
and its agent stops, saying why; started again, the node registers as a new machine that runs
every item again; deleted again, it resets again."""

from __future__ import annotations

from pathlib import Path

from tests.support.rollout import Fleet, all_ready, fleet, item_log, spec

# Undoes the prepare item's file and logs itself, as the other items do.
RESET_ITEMS = """\
    - name: reset-{role}
      phase: reset
      action:
        type: exec
        argv: [sh, -c, 'rm -f etc/lab/node.env; echo "$1" >> var/log/items.log', sh, reset-{role}]
"""
EXIT_REMOVED = 3  # what `nodeagent run` exits with once its machine was deleted


def deleted(f: Fleet, hostname: str) -> str:
    """`coordinator delete` the machine; once its agent stopped, the machine's id."""
    machine_id = str(f.admin_json("machines", "get", hostname)["id"])
    f.admin("delete", hostname)
    agent = f.agents[hostname]
    f.wait_for(f"{hostname}'s agent to stop", lambda: agent.poll() is not None)
    assert agent.returncode == EXIT_REMOVED
    assert hostname not in {m["hostname"] for m in f.admin_json("machines")}
    return machine_id


def test_a_machine_deleted_and_added_again_runs_every_item_again(tmp_path: Path) -> None:
    with fleet(tmp_path, managers=("m1",), workers=("w3",),
               cluster_spec=spec(RESET_ITEMS)) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f))
        env = f.root("w3") / "etc/lab/node.env"
        state = f.root("w3") / "var/lib/nodeagent"
        assert env.exists()

        first = deleted(f, "w3")
        assert item_log(f, "w3") == ["prepare-worker", "deploy-worker", "reset-worker"]
        assert not env.exists()
        log = (tmp_path / "w3.log").read_text()
        assert f"machine w3 ({first}) was deleted from cluster lab at " in log
        assert "`systemctl restart nodeagent` registers this node again" in log
        assert not (state / "identity.json").exists() and not (state / "journal.json").exists()
        assert (state / f"journal.{first}.json").exists()

        f.join("w3")  # what `systemctl restart nodeagent` does: a new machine, an empty journal
        f.wait_for("every machine Ready again", lambda: all_ready(f))
        assert item_log(f, "w3") == ["prepare-worker", "deploy-worker", "reset-worker",
                                     "prepare-worker", "deploy-worker"]
        assert env.read_text().startswith("NODE=w3\nROLE=worker\n")

        second = deleted(f, "w3")
        assert second != first
        assert item_log(f, "w3")[-1:] == ["reset-worker"] and not env.exists()
        assert item_log(f, "w3").count("reset-worker") == 2
        assert item_log(f, "m1") == ["prepare-manager", "deploy-manager"]
