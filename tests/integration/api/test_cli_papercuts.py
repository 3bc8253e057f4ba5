"""What the admin CLI tells an operator off the happy path: a token's real state, what an
apply did to a pause, each problem of a refused spec once, the environment it reads."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from coordinator.cli import main
from tests.support.builders import API_CLUSTER, registration
from tests.support.harness import InProcessCoordinator, ServedCoordinator, running_coordinator

MISSPELT = Path(__file__).resolve().parents[2] / "data" / "bad-specs" / "unknown-placeholder.yaml"


def status_of(listed: str, token_id: str) -> str:
    """The STATUS column of a token's row in `join-token list`."""
    row = next(line for line in listed.splitlines() if line.startswith(token_id))
    return row.split(None, 5)[-1]


async def test_join_token_list_tells_used_up_expired_and_revoked_from_active(
        env: InProcessCoordinator) -> None:
    async def create(**body: Any) -> dict[str, Any]:
        return dict(await env.call("POST", "/v1/clusters/lab/join-tokens", 201, json=body))

    used_up, expiring = await create(maxUses=1), await create(ttl="1h")
    revoked, active = await create(), await create(maxUses=5)
    await env.call("DELETE", f"/v1/join-tokens/{revoked['id']}", 200)
    await env.call("POST", "/v1/agent/register", 201,
                   json=registration("node-a", used_up["token"]),
                   headers={"Authorization": f"Bearer {used_up['token']}"})
    env.clock.now += 2 * 3600
    listed = await env.cli("join-token", "list")
    assert [status_of(listed, t["id"]) for t in (used_up, expiring, revoked, active)] == [
        "used up", "expired", "revoked", "active"]


async def test_apply_keeps_a_pause_and_says_so_unless_the_file_says_otherwise(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    """`upgrade pause` then `cluster apply` of a new release is how an upgrade is staged: the
    apply must not start it behind the operator's back, and says the pause holds."""
    staged = tmp_path / "lab-2.0.yaml"
    staged.write_text(API_CLUSTER.replace('release: "1.0"', 'release: "2.0"'))
    assert "paused" not in API_CLUSTER
    await env.cli("upgrade", "pause", "lab")
    applied = await env.cli("cluster", "apply", "-f", str(staged))
    assert applied.splitlines() == [
        "cluster lab changed: release 2.0, generation 3",
        "upgrades still paused: no machine starts upgrading until "
        "`coordinator upgrade resume lab`"]
    assert (await env.call("GET", "/v1/clusters/lab", 200))["spec"]["settings"]["upgrade"][
        "paused"] is True

    resuming = tmp_path / "lab-2.0-resumed.yaml"
    resuming.write_text(staged.read_text().replace(
        "settings: {", "settings: {upgrade: {paused: false}, "))
    applied = await env.cli("cluster", "apply", "-f", str(resuming))
    assert applied.splitlines()[1] == ("upgrades resumed: this file says "
                                       "settings.upgrade.paused: false")
    assert (await env.cli("cluster", "apply", "-f", str(staged))).splitlines() == [
        "cluster lab unchanged: release 2.0, generation 4"]


async def test_a_refused_spec_names_each_problem_once(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    refused = await env.cli("cluster", "apply", "-f", str(MISSPELT), exit_code=2)
    assert refused.count("unknown placeholder ${machine.hostnme}") == 1, refused
    assert refused.startswith("error: invalid document: line 14: machineTypes.manager[2]"
                              ".action.argv[1]: unknown placeholder ${machine.hostnme}"), refused
    two = tmp_path / "two.yaml"
    two.write_text(API_CLUSTER.replace('argv: ["true"]}}', 'argv: ["${machine.hostnme}"]}}', 2))
    refused = await env.cli("cluster", "apply", "-f", str(two), exit_code=2)
    lines = refused.splitlines()
    assert lines[0] == "error: invalid document (2 problems):", refused
    assert [line.split(": ", 2)[:2] for line in lines[1:]] == [
        ["  line 6", "machineTypes.manager[0].action.argv[0]"],
        ["  line 7", "machineTypes.manager[1].action.argv[0]"]], refused
    assert refused.count("(known: ${cluster.name}, ") == 1, refused  # the names, listed once
    assert refused.count("${machine.hostnme}") == 2


async def deployed_first_manager(env: InProcessCoordinator) -> None:
    """m1 approved as a manager and through Prepare: the planner chose it first."""
    m1 = await env.register("m1")
    await env.cli("approve", "m1", "--role", "manager")
    await env.coordinator.reconciler.reconcile_once()  # Pending -> Prepare
    await env.report_all(m1)
    await env.coordinator.reconciler.reconcile_once()
    assert (await env.machine("m1"))["state"] == "Deploy"


async def test_deleting_the_first_manager_or_a_cluster_without_a_terminal_needs_yes(
        env: InProcessCoordinator) -> None:
    """Without a terminal to ask at, nothing irreversible happens unless --yes says so."""
    await deployed_first_manager(env)
    await env.register("w1")
    refused = await env.cli("delete", "m1", exit_code=2)
    assert refused == ("error: m1 is the first manager of lab (${managers.first}: the manager "
                       "the others joined through). Delete it? Not at a terminal to ask: pass "
                       "--yes to go ahead.\n")
    assert (await env.machine("m1"))["state"] == "Deploy"
    refused = await env.cli("cluster", "delete", "lab", exit_code=2)
    assert refused.startswith("error: Delete cluster lab? Its 2 machines run their reset items "
                              "and leave;"), refused
    assert "pass --yes" in refused and not (await env.call("GET", "/v1/clusters/lab",
                                                           200))["deleting"]

    assert await env.cli("delete", "w1") == "w1: removed\n"  # Pending, not the first manager
    assert await env.cli("delete", "m1", "--yes") == "m1: resetting\n"
    await env.cli("cluster", "delete", "lab", "--yes")
    assert (await env.call("GET", "/v1/clusters/lab", 200))["deleting"]


def at_terminal(served: ServedCoordinator, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI run with a terminal as its stdin, the operator typing answer at its prompt."""
    main, terminal = pty.openpty()
    try:
        os.write(main, answer.encode() + b"\n")
        return subprocess.run(served.cli_argv(*args), stdin=terminal, capture_output=True,
                              text=True, timeout=30, check=False)
    finally:
        os.close(main)
        os.close(terminal)


def test_cluster_delete_at_a_terminal_asks_and_a_no_deletes_nothing(tmp_path: Path) -> None:
    with running_coordinator(tmp_path) as served:
        served.register("w1")
        declined = at_terminal(served, "n", "cluster", "delete", "lab")
        assert declined.stdout == ("Delete cluster lab? Its 1 machine run their reset items and "
                                   "leave; its Kubernetes cluster is gone for good. [y/N]: ")
        assert (declined.returncode, declined.stderr) == (1, "nothing done\n")
        assert not served.cli_json("cluster", "get", "lab")["deleting"]
        accepted = at_terminal(served, "y", "cluster", "delete", "lab")
        assert accepted.returncode == 0 and accepted.stdout.endswith(
            "[y/N]: cluster lab: machines are resetting; it goes when they are done\n")
        assert "no cluster named lab" in served.cli("cluster", "get", "lab", ok=False).stderr


TWO_PREPARE_ITEMS = API_CLUSTER.replace(
    '    - {name: join, phase: deploy',
    '    - {name: runtime, phase: prepare, action: {type: exec, argv: ["true"]}}\n'
    '    - {name: join, phase: deploy')


async def preparing_worker(env: InProcessCoordinator) -> dict[str, Any]:
    """w1, a worker in Prepare (setup, runtime) running setup."""
    await env.call("PUT", "/v1/clusters", 200, data=TWO_PREPARE_ITEMS)
    w1 = await env.register("w1")
    await env.cli("approve", "w1", "--role", "worker")
    await env.coordinator.reconciler.reconcile_once()
    await env.report_item(w1, "setup", "running")
    return w1


async def test_items_done_and_the_item_at_work_never_read_as_two_counts(
        env: InProcessCoordinator) -> None:
    """ITEMS counts the items done; PROGRESS (and status's ITEM) names the one at work rather
    than numbering it, which beside `0/2` read `1/2 running`: a contradiction."""
    await preparing_worker(env)
    listed = (await env.cli("machines")).splitlines()
    assert listed[1].split()[4:7] == ["0/2", "setup", "running"], listed
    assert "1/2" not in listed[1]
    shown = await env.cli("status", "lab")
    row = next(line for line in shown.splitlines() if line.startswith("w1 "))
    assert row.split()[4:6] == ["0/2", "setup"], row


async def test_machines_get_shows_one_machine_in_full_with_each_item_and_where_it_stands(
        env: InProcessCoordinator) -> None:
    w1 = await preparing_worker(env)
    await env.report_item(w1, "setup", "succeeded")
    await env.report_item(w1, "runtime", "failed", attempt=2, exit_code=100,
                          error="exit status 100")
    shown = (await env.cli("machines", "get", "w1")).splitlines()
    fields = {line[:11].strip(): line[11:] for line in shown if not line.startswith(" ")}
    assert fields["hostname"] == "w1" and fields["cluster"] == "lab"
    assert fields["id"] == w1["machine_id"]
    assert (fields["role"], fields["approved"]) == ("worker", "yes")
    assert fields["state"].startswith("Prepare for ")
    assert fields["responding"].startswith("yes, last seen ")
    assert fields["credential"].startswith("expires ")
    assert fields["prechecks"] == "passed"
    assert fields["progress"].startswith("runtime attempt 2 failing for ")
    assert fields["items"] == "prepare: 1 of 2 applied"
    at = shown.index("items      prepare: 1 of 2 applied")
    assert [line.split() for line in shown[at + 1:at + 3]] == [
        ["setup", "applied"], ["runtime", "failed", "(attempt", "2)"]]
    assert {"labels", "node", "address", "devices"} <= set(fields)


async def test_join_token_create_prints_the_string_alone_on_stdout_and_its_id_beside(
        env: InProcessCoordinator) -> None:
    """Scripts read the join string from stdout; the id `join-token revoke` takes goes to
    stderr, or the operator has to find it in `join-token list` among the others."""
    created = await env.cli_result("join-token", "create", "lab")
    assert created.stdout.startswith("na1.") and len(created.stdout.splitlines()) == 1
    (token,) = await env.call("GET", "/v1/clusters/lab/join-tokens", 200)
    assert created.stderr == (f"join token {token['id']} (revoke it: coordinator join-token "
                              f"revoke {token['id']})\n")
    await env.cli("join-token", "revoke", token["id"])
    assert (await env.call("GET", "/v1/join-tokens", 200))[0]["state"] == "revoked"


async def test_apply_says_created_and_apply_and_plan_warn_alike_of_an_older_release(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    first = tmp_path / "edge.yaml"
    first.write_text(API_CLUSTER.replace("name: lab", "name: edge"))
    assert (await env.cli("cluster", "apply", "-f", str(first))).splitlines() == [
        "cluster edge created: release 1.0, generation 1"]
    newer, older = tmp_path / "lab-2.0.yaml", tmp_path / "lab-1.0.yaml"
    newer.write_text(API_CLUSTER.replace('release: "1.0"', 'release: "2.0"'))
    older.write_text(API_CLUSTER)
    await env.cli("cluster", "apply", "-f", str(newer))
    warning = ("warning: release 1.0 is older than 2.0, the cluster's: nothing is rolled back. "
               "Each machine runs only the items new or changed since it last ran (none when "
               "they are as they were) and is recorded at 1.0; to undo what items did, write "
               "items that undo it")
    planned = await env.cli("upgrade", "plan", "lab", "-f", str(older))
    assert warning in planned.splitlines(), planned
    applied = await env.cli_result("cluster", "apply", "-f", str(older))
    assert applied.stdout == "cluster lab changed: release 1.0, generation 3\n"
    assert applied.stderr.splitlines() == [warning]


WAITING = """\
name: lab
release: "1.0"
machineTypes:
  manager:
    - {name: init, phase: deploy, when: {firstManager: true}, action: {type: exec, argv: ["true"]}}
    - {name: extra, phase: deploy, when: {firstManager: false}, outputs: [{name: v, secret: false}],
       action: {type: exec, argv: ["true"]}}
  worker:
    - {name: join, phase: deploy, action: {type: exec, argv: [echo, "${outputs.extra.v}"]}}
"""


async def test_machines_get_names_the_managers_a_waiting_machine_waits_on_as_the_list_does(
        env: InProcessCoordinator) -> None:
    """`machines get` once judged what a machine waits for without its cluster's managers
    and said `managers: none` beside a list that named them (fixed by 45e34da)."""
    await env.call("PUT", "/v1/clusters", 200, data=WAITING)
    m1 = await env.register("m1")
    await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})

    async def ready() -> bool:
        await env.report_all(m1)
        return bool((await env.machine("m1"))["state"] == "Ready")

    await env.until("m1 Ready", ready)
    for hostname, role in (("m2", "manager"), ("w1", "worker")):
        await env.register(hostname)
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})

    async def waiting() -> bool:
        await env.assignment(env.agents["w1"])
        return "waits for" in (await env.machine("w1"))["note"]["text"]

    await env.until("w1 waits", waiting)
    said = ("waits for ${outputs.extra.v} from item extra (not run yet; managers: m1 (Ready), "
            "m2 (Deploy))")
    listed = next(line for line in (await env.cli("machines")).splitlines()
                  if line.startswith("w1 "))
    assert listed.endswith(said), listed
    assert f"progress   {said}" in (await env.cli("machines", "get", "w1")).splitlines()


def test_init_without_a_cluster_says_how_to_get_a_join_string(tmp_path: Path) -> None:
    done = CliRunner().invoke(main, ["init", "--data-dir", str(tmp_path / "data"),
                                     "--name", "127.0.0.1"])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1] == (
        "no cluster yet: once it serves, `coordinator cluster apply -f SPEC`, then "
        "`coordinator join-token create NAME` prints a join string for it")
