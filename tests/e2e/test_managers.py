"""The manager set changes while the post-deploy step runs, on the 8-agent cluster of
test_rollout (3 managers, 5 workers, in network namespaces): the step starts on m1 once the
workers are Ready, then m2 and m3 join. Every machine reconfigures for the three managers,
m3 included, the managers one at a time (m1 among them, which stops the step) and the
workers two at a time; the step waits for m1 and runs there again, never on two managers at
once: each run logs to one file all agents write, and no run writes after another started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.rollout import (
    BATCH,
    MANAGERS,
    WORKERS,
    Fleet,
    all_ready,
    fleet,
    spec,
    state_history,
)

# What the managers deploy with, and the list each machine's reconfigure items applied.
ITEMS = """\
    - name: manager-values
      phase: deploy
      action:
        type: file
        path: /etc/lab/deploy.env
        template: "FIRST=${{managers.first}}\\nMANAGERS=${{managers}}\\n"
    - name: manager-list
      phase: reconfigure
      action: {{type: file, path: /etc/lab/managers, template: "${{managers}}\\n"}}
"""


def post_deploy(log: Path, release: str) -> str:
    """A post-deploy item that runs until the file `release` exists, logging START, a TICK
    every 0.1 s and END, each with its run's id (hostname and start time), to `log`."""
    script = (f'run="$1-$(date +%s%N)"; echo "START $run" >> {log}; '
              f'until [ -e {release} ]; do echo "TICK $run" >> {log}; sleep 0.1; done; '
              f'echo "END $run" >> {log}')
    return f"""\
    - name: helm-controller
      phase: postdeploy
      timeout: 300
      action:
        type: exec
        argv: [sh, -c, '{script}', sh, "${{machine.hostname}}"]
"""


def runs(log: Path) -> list[tuple[str, str]]:
    """(what, run id) of each line of the log, in the order written, once checked that no run
    wrote after another started: the step never ran on two managers at once."""
    lines = [(what, run) for what, run in (line.split() for line in (
        log.read_text().splitlines() if log.exists() else []))]
    current = None
    for what, run in lines:
        if what == "START":
            current = run
        assert run == current, f"{run} ran on after {current} started"
    return lines


def started_at(run: str) -> float:
    """When a run began, as its id says (unix time)."""
    return int(run.rsplit("-", 1)[1]) / 1e9


def file_on(f: Fleet, hostname: str, path: str) -> str:
    found = f.root(hostname) / path.lstrip("/")
    return found.read_text() if found.exists() else ""


def test_the_post_deploy_step_runs_on_one_manager_while_the_managers_change(
        tmp_path: Path) -> None:
    log, release = tmp_path / "postdeploy.log", tmp_path / "postdeploy.release"
    cluster = spec(ITEMS, post_deploy(log, str(release)))
    with fleet(tmp_path, closed_gates=("m2",), cluster_spec=cluster) as f:
        ips = {h: f.node(h).ip for h in MANAGERS + WORKERS}
        f.wait_for("the workers Ready and the step running", lambda: runs(log) and all(
            m["state"] == "Ready" for m in f.admin_json("machines") if m["hostname"] in WORKERS))
        f.open_gate("m2")  # m2, then m3, join while the step runs
        managers = ",".join(ips[m] for m in MANAGERS) + "\n"
        f.wait_for("every machine reconfigured for the three managers", lambda: runs(log) and (
            all_ready(f) and all(file_on(f, h, "/etc/lab/managers") == managers for h in ips)))
        f.wait_for("the step running again", lambda: len({r for _, r in runs(log)}) >= 2)
        release.touch()
        f.wait_for("the step done", lambda: any(what == "END" for what, _ in runs(log)))
        events = f.events()

    lines = runs(log)
    started = [run for what, run in lines if what == "START"]
    assert all(run.startswith("m1-") for run in started), f"not on the first manager: {started}"
    assert [run for what, run in lines if what == "END"] == started[-1:], "the step went on"
    # The first run was cut by m1's Reconfigure, and the step waited for m1 to come back.
    away = [e["time"] for e in events if e["kind"] == "state" and e["hostname"] == "m1"
            and e["data"]["to"] == "Reconfigure"]
    assert any(started_at(started[0]) < t < started_at(started[1]) for t in away), away
    assert_reconfigured_in_batches(events)
    first = f"FIRST={ips['m1']}\n"
    assert file_on(f, "m1", "/etc/lab/deploy.env") == first + "MANAGERS=\n"
    assert file_on(f, "m2", "/etc/lab/deploy.env") == first + f"MANAGERS={ips['m1']}\n"
    assert file_on(f, "m3", "/etc/lab/deploy.env") == first + f"MANAGERS={ips['m1']},{ips['m2']}\n"


def assert_reconfigured_in_batches(events: list[dict[str, Any]]) -> None:
    """At every moment at most one manager deploys, upgrades or reconfigures, and at most
    BATCH workers reconfigure; every machine finished a Reconfigure once m3 was Ready, m3
    included (one under way when m3 joined was given the items for the new list)."""
    for states in state_history(events):
        busy = [h for h in MANAGERS if states.get(h) in ("Deploy", "Upgrade", "Reconfigure")]
        assert len(busy) <= 1, f"managers changing together: {busy}"
        reconfiguring = [h for h in WORKERS if states.get(h) == "Reconfigure"]
        assert len(reconfiguring) <= BATCH, f"workers reconfiguring together: {reconfiguring}"
    changes = [(e["hostname"], e["data"]["from"], e["data"]["to"]) for e in events
               if e["kind"] == "state"]
    joined = changes.index(("m3", "Deploy", "Ready"))
    assert {h for h, was, now in changes[joined:] if (was, now) == ("Reconfigure", "Ready")} \
        == set(MANAGERS + WORKERS)
