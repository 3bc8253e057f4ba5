"""Three coordinator replicas on one PostgreSQL database and the 8 agents of test_rollout, each
agent given every replica's URL. The leader, which is also the replica every agent's join
string names, is killed -9 mid-rollout: another replica takes over, the agents move on, the
rollout completes, every item ran once, and the ordering invariants held across both leaders."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.support.lan import HUB_IP
from tests.support.postgres import Postgres
from tests.support.rollout import (
    MANAGERS,
    WORKERS,
    Fleet,
    all_ready,
    assert_ordering_held,
    fleet,
    item_log,
)

TAKEOVER_SECONDS = 10.0


def leader(postgres: Postgres, dsn: str) -> tuple[int, int]:
    """(pid of the leading replica, leader epoch); holders read "HOSTNAME pid PID"."""
    holder, epoch = postgres.psql("SELECT holder, epoch FROM leader", dsn).split("|")
    return int(holder.rsplit(" ", 1)[1]) if holder else 0, int(epoch)


def state(f: Fleet, hostname: str) -> str:
    return str(f.admin_json("machines", "get", hostname)["state"])


def test_the_leader_killed_mid_rollout_is_replaced_and_the_rollout_completes(
        tmp_path: Path, postgres: Postgres) -> None:
    gated = ("m2", "m3", *WORKERS)  # their deploy items wait until the leader is gone
    with postgres.database(via_socket=True) as dsn, \
            fleet(tmp_path, closed_gates=gated, store=dsn, replicas=3) as f:
        f.wait_for("m1 Ready and m2 deploying",
                   lambda: state(f, "m1") == "Ready" and state(f, "m2") == "Deploy")
        pid, epoch = leader(postgres, dsn)
        assert pid == f.replicas[0].pid  # started first; and the one the join string names

        killed = time.monotonic()
        f.kill_replica(pid)
        new_pid, new_epoch = f.wait_for(
            "another replica leading", lambda: leader(postgres, dsn)[0] != pid
            and leader(postgres, dsn), timeout=TAKEOVER_SECONDS + 5)
        takeover = time.monotonic() - killed
        print(f"takeover after kill -9 of the leader: {takeover:.2f}s")
        assert takeover < TAKEOVER_SECONDS
        assert new_epoch == epoch + 1 and new_pid in [r.pid for r in f.replicas]

        for hostname in gated:
            f.open_gate(hostname)
        f.wait_for("every machine Ready", lambda: all_ready(f), timeout=120)
        assert_ordering_held(f.events())
        for hostname in MANAGERS + WORKERS:
            role = "manager" if hostname in MANAGERS else "worker"
            assert item_log(f, hostname) == [f"prepare-{role}", f"deploy-{role}"], hostname
        assert len([e for e in f.events() if e["kind"] == "registered"]) == 8
        # The agents were talking to the dead replica: each moved on to another.
        dead = re.escape(f"https://{HUB_IP}:{f.ports[0]}/v1/")
        moved = re.compile(rf"{dead}\S+: .*; trying https://{re.escape(HUB_IP)}:(\d+) next")
        for hostname in MANAGERS + WORKERS:
            log = (tmp_path / f"{hostname}.log").read_text()
            found = moved.search(log)
            assert found and int(found[1]) in f.ports[1:], (hostname, log[-800:])
