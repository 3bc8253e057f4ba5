"""A coordinator and 8 agents (3 managers, 5 workers), each agent in its own network namespace
with its own hostname, rolling a cluster out to Ready; the event history must show the
ordering invariants held. Then again with one agent killed -9 mid-item and restarted."""

from __future__ import annotations

from pathlib import Path

from tests.support.rollout import MANAGERS, WORKERS, all_ready, assert_ordering_held, fleet, item_log


def test_eight_agents_roll_out_to_ready_in_order(tmp_path: Path) -> None:
    with fleet(tmp_path) as f:
        f.wait_for("every machine Ready", lambda: all_ready(f))
        assert_ordering_held(f.events())
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname) == [f"prepare-{role}", f"deploy-{role}"]
            env = (f.root(hostname) / "etc/lab/node.env").read_text()
            assert f"NODE={hostname}\nROLE={role}\n" in env
        machines = {m["hostname"]: m for m in f.admin_json("machines")}
        assert machines["w1"]["ip"] == f.node("w1").ip  # the default-route address
        table = f.admin("status", "lab")
        assert "8 Ready" in table and "w5" in table
        assert "✓ Cluster ready" in table and "8 of 8 Ready" in table
        logs = f.admin("machines", "logs", "w1")
        assert "prepare/node-env attempt 1 succeeded" in logs
        assert "deploy/deploy-worker attempt 1 succeeded (exit 0," in logs
        # The agent's own log: one logfmt line per item result, as the journal would get it.
        agent_log = (tmp_path / "w1.log").read_text().splitlines()
        assert any('msg="item succeeded" item=deploy-worker phase=deploy status=succeeded '
                   'attempt=1 exit_code=0 duration=' in line for line in agent_log), agent_log[-5:]


def test_an_agent_killed_mid_item_resumes_and_applies_every_item_once(tmp_path: Path) -> None:
    with fleet(tmp_path, closed_gates=("w1",)) as f:
        def w1_deploying() -> bool:
            return any(e["kind"] == "item" and e["hostname"] == "w1"
                       and e["data"]["item"] == "deploy-worker"
                       and e["data"]["status"] == "running" for e in f.events())

        f.wait_for("w1 running its deploy item", w1_deploying)
        f.kill_node("w1")
        token = f.admin("join-token", "create", "lab").strip()
        f.start_agent("w1", token)  # same state dir: it must not register again
        f.open_gate("w1")
        f.wait_for("every machine Ready", lambda: all_ready(f))
        assert_ordering_held(f.events())
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname) == [f"prepare-{role}", f"deploy-{role}"], hostname
        registrations = [e for e in f.events() if e["kind"] == "registered"]
        assert len(registrations) == 8
        attempts = [e["data"]["attempt"] for e in f.events() if e["kind"] == "item"
                    and e["hostname"] == "w1" and e["data"]["item"] == "deploy-worker"
                    and e["data"]["status"] == "running"]
        assert len(attempts) == 2  # the interrupted run, and the resumed one
