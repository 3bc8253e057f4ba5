"""`cluster render` and its endpoint, in-process on a real store: what the stored machines
would run, what a hypothetical fleet would, a spec before it is stored; bad input refused
naming what is wrong."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from coordinator.cli import main
from coordinator.domain.model import MachineState, Material, MintJob
from tests.support.builders import MINTING_CLUSTER
from tests.support.harness import InProcessCoordinator
from tests.support.waiting import wait_until_async

MISSPELT = Path(__file__).resolve().parents[2] / "data" / "bad-specs" / "unknown-placeholder.yaml"

SPEC = """\
name: lab
release: "1.0"
machineTypes:
  manager:
    - name: init
      phase: deploy
      action: {type: exec, argv: [kubeadm, init, "--advertise=${machine.ip}"], cwd: /root}
    - {name: wipe, phase: reset, action: {type: exec, argv: [kubeadm, reset]}}
  worker:
    - name: kubelet
      phase: prepare
      action:
        type: file
        path: /etc/kubelet.conf
        mode: "0600"
        template: |
          name: ${machine.hostname}
          servers: ${managers}
          literal: $${HOME}
    - name: join
      phase: deploy
      action: {type: exec, argv: [kubeadm, join, "${managers.first}"], env: {NODE: "${machine.hostname}"}}
"""


async def cli(env: InProcessCoordinator, *args: str) -> Result:
    """The CLI run against env as the admin."""
    url = str(env.client.make_url("")).rstrip("/")
    return await asyncio.to_thread(CliRunner().invoke, main, [
        "--url", url, "--token", env.admin["Authorization"].split()[1], *args])


async def lab(env: InProcessCoordinator) -> None:
    """SPEC stored; m1 (manager) and w1 (worker) Ready, their agents having applied what they
    were given; w2 registered, not approved."""
    await env.call("PUT", "/v1/clusters", 200, data=SPEC)
    agents = []
    for hostname, role in (("m1", "manager"), ("w1", "worker")):
        agents.append(await env.register(hostname))
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})

    async def ready() -> bool:
        await env.coordinator.reconciler.reconcile_once()
        for agent in agents:
            await env.report_all(agent)
        return (await env.call("GET", "/v1/clusters/lab/status", 200))["counts"] == {"Ready": 2}

    await wait_until_async(ready, 15, "m1 and w1 Ready", interval=0.05)
    await env.register("w2")


def items(machine: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{p['phase']}/{i['name']}": i["action"] for p in machine["phases"] for i in p["items"]}


async def test_the_stored_machines_each_with_their_items_filled_in(env: InProcessCoordinator) -> None:
    await lab(env)
    rendered = await env.call("GET", "/v1/clusters/lab/render", 200)
    assert (rendered["cluster"], rendered["release"], rendered["fleet"]) == ("lab", "1.0", None)
    machines = {m["hostname"]: m for m in rendered["machines"]}
    assert {h: (m["role"], m["state"]) for h, m in machines.items()} == {
        "m1": ("manager", "Ready"), "w1": ("worker", "Ready"), "w2": (None, "Pending")}
    assert items(machines["m1"]) == {  # at its release, with nothing changed: no upgrade
        "deploy/init": {"type": "exec", "argv": ["kubeadm", "init", "--advertise=127.0.0.1"],
                        "env": {}, "cwd": "/root", "expectedExitCodes": [0]},
        "reset/wipe": {"type": "exec", "argv": ["kubeadm", "reset"], "env": {},
                       "expectedExitCodes": [0]}}
    assert items(machines["w1"]) == {
        "prepare/kubelet": {"type": "file", "path": "/etc/kubelet.conf", "mode": "0600",
                            "template": "name: w1\nservers: 127.0.0.1\nliteral: ${HOME}\n"},
        "deploy/join": {"type": "exec", "argv": ["kubeadm", "join", "127.0.0.1"],
                        "env": {"NODE": "w1"}, "expectedExitCodes": [0]}}
    assert machines["w2"]["phases"] == []
    assert machines["w1"]["values"]["machine.hostname"] == "w1"

    one = await env.call("GET", "/v1/clusters/lab/render?machine=m1&phase=reset", 200)
    assert [(m["hostname"], list(items(m))) for m in one["machines"]] == [("m1", ["reset/wipe"])]


async def test_a_spec_before_it_is_stored_on_the_machines_or_a_hypothetical_fleet(
        env: InProcessCoordinator) -> None:
    await lab(env)
    changed = SPEC.replace("kubeadm, join,", "kubeadm, join, --v=5,")
    rendered = await env.call("POST", "/v1/clusters/lab/render?machine=w1", 200, data=changed)
    w1 = items(rendered["machines"][0])
    assert w1["deploy/join"]["argv"] == ["kubeadm", "join", "--v=5", "127.0.0.1"]
    assert list(w1) == ["prepare/kubelet", "deploy/join", "upgrade/join"], "its upgrade"
    assert "--v=5" not in json.dumps(await env.call("GET", "/v1/clusters/lab", 200)), "stored"

    fresh = await env.call("POST", "/v1/clusters/edge/render", 200,
                           data=SPEC.replace("name: lab", "name: edge"))
    assert fresh["fleet"] == {"managers": 1, "workers": 1}, "no machines: the smallest fleet"
    assert [m["hostname"] for m in fresh["machines"]] == ["manager-1", "worker-1"]
    assert items(fresh["machines"][1])["deploy/join"]["argv"] == ["kubeadm", "join", "192.0.2.1"]
    await env.call("GET", "/v1/clusters/edge", 404)


async def test_bad_queries_are_refused_naming_what_is_wrong(env: InProcessCoordinator) -> None:
    await lab(env)
    for query, field, why in (("phase=later", "phase", "Input should be 'prepare'"),
                              ("fleet=3", "fleet", "expected MANAGERS,WORKERS, e.g. 3,50"),
                              ("fleet=0,3", "fleet", "at least one manager"),
                              ("colour=blue", "colour", "unknown field")):
        refused = await env.call("GET", f"/v1/clusters/lab/render?{query}", 422)
        assert [p["path"] for p in refused["problems"]] == [field]
        assert why in refused["problems"][0]["message"]
    missing = await env.call("GET", "/v1/clusters/lab/render?machine=w9", 404)
    assert missing["error"] == "no machine with id or hostname w9 in cluster lab"
    assert (await env.call("GET", "/v1/clusters/nope/render", 404))["error"] == \
        "no cluster named nope"
    other = await env.call("POST", "/v1/clusters/nope/render", 409, data=SPEC)
    assert other["error"] == "the spec is for cluster lab, not nope"


async def test_the_cli_shows_a_fleet_once_per_kind_of_machine(env: InProcessCoordinator) -> None:
    await lab(env)
    result = await cli(env, "cluster", "render", "lab", "--fleet", "3,50")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("cluster lab, release 1.0, on a hypothetical fleet of 3 managers and "
                        "50 workers, as if deployed at an earlier release")
    assert lines[1:5] == ["manager-1 (manager, Ready, 192.0.2.1)", "  deploy",
                          "    init: exec", "      argv: kubeadm init --advertise=192.0.2.1"]
    worker = lines.index("worker-1 (worker, Ready, 192.0.2.4)")
    assert lines[worker + 1:worker + 11] == [
        "  prepare", "    kubelet: file /etc/kubelet.conf, mode 0600", "      template:",
        "        | name: worker-1", "        | servers: 192.0.2.1,192.0.2.2,192.0.2.3",
        "        | literal: ${HOME}", "  deploy", "    join: exec",
        "      argv: kubeadm join 192.0.2.1", "      env NODE: worker-1"]
    assert lines[-3:] == [
        "manager-2, manager-3 (2 machines): as manager-1, but for their values",
        "worker-2 … worker-50 (49 machines): as worker-1, but for their values",
        "(--machine NAME or -o json shows each)"]
    every = await cli(env, "cluster", "render", "lab", "--fleet", "3,50", "-o", "json")
    assert len(json.loads(every.stdout)["machines"]) == 53


async def test_the_cli_refuses_a_bad_spec_naming_its_line_and_an_unknown_machine(
        env: InProcessCoordinator) -> None:
    await lab(env)
    bad = await cli(env, "cluster", "render", "lab", "--file", str(MISSPELT))
    assert bad.exit_code == 2 and isinstance(bad.exception, SystemExit), bad.output
    assert bad.stderr.startswith(  # one problem: said once, in the API's message
        "error: invalid document: line 14: machineTypes.manager[2].action.argv[1]: unknown "
        "placeholder ${machine.hostnme}; did you mean ${machine.hostname}?")
    assert bad.stderr.count("${machine.hostnme}") == 1
    assert "Traceback" not in bad.output and bad.stdout == ""

    unknown = await cli(env, "cluster", "render", "lab", "--machine", "w9")
    assert (unknown.exit_code, unknown.stderr) == (
        1, "error: no machine with id or hostname w9 in cluster lab\n")
    fleet = await cli(env, "cluster", "render", "lab", "--fleet", "three")
    assert fleet.exit_code == 2
    assert "Invalid value for '--fleet': 'three': expected MANAGERS,WORKERS" in fleet.stderr


# -- what is stored decides what is secret -----------------------------------------------------

INIT_TOKEN, CA_HASH = "abcdef.0123456789abcdef", "sha256:" + "c0ffee" * 10
JOIN_TOKEN, REVOKED_TOKEN = "ghijkl.9876543210fedcba", "mnopqr.5555555555555555"
STORED_SECRETS = (INIT_TOKEN, CA_HASH, JOIN_TOKEN, REVOKED_TOKEN)
ENDPOINT = "10.9.8.7:6443"

# What a read-only token may send to read them back: every output made public, and init's
# token (stored by an earlier spec, declared by none now) declared public; the mint item
# redeclared as a deploy item whose output is public; every stored output named in texts of
# every kind (argv, env, cwd, a file's template); the mint item's output made public.
ALL_PUBLIC = MINTING_CLUSTER.replace(
    "outputs: [{name: caCertHash}, ",
    "outputs: [{name: token, secret: false}, {name: caCertHash, secret: false}, ")
EVERY_TEXT = """\
    - name: show
      phase: deploy
      action:
        type: exec
        argv: [echo, "${outputs.init.token}", "${outputs.init.caCertHash}", "${outputs.token.token}"]
        env: {TOKEN: "${outputs.token.token}"}
        cwd: "/${outputs.init.token}"
    - name: keep
      phase: deploy
      action: {type: file, path: /tmp/keep, template: "${outputs.init.caCertHash} ${outputs.token.token}"}
"""
REDECLARED = ALL_PUBLIC.replace(
    "phase: mint\n      lifetimeSeconds: 60\n      action: {type: exec, argv: [kubeadm, token, "
    "create, --ttl, \"${mint.lifetimeSeconds}s\"]}\n      outputs: [{name: token}]",
    "phase: deploy\n      when: {firstManager: true}\n      action: {type: exec, argv: [kubeadm, "
    "token, create]}\n      outputs: [{name: token, secret: false}]",
).replace("  worker:\n", "  worker:\n" + EVERY_TEXT)
MINTED_PUBLIC = ALL_PUBLIC.replace("outputs: [{name: token}]",
                                  "outputs: [{name: token, secret: false}]")


async def stored_secrets(env: InProcessCoordinator) -> None:
    """MINTING_CLUSTER stored as edge; m1, its first manager, holds init's outputs (and a
    token from an earlier spec); w1 (in Deploy) join material minted for it; m2 revokes
    material minted for another machine."""
    await env.call("PUT", "/v1/clusters", 200, data=MINTING_CLUSTER)
    for hostname, role in (("m1", "manager"), ("m2", "manager"), ("w1", "worker")):
        await env.register(hostname, cluster="edge")
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
    (m1,), (m2,), (w1,) = [await env.store.machines_by_hostname(h) for h in ("m1", "m2", "w1")]
    now = env.clock()
    await env.store.commit([
        replace(m1, deploy_order=1, outputs={
            "init.token": INIT_TOKEN, "init.caCertHash": CA_HASH, "init.endpoint": ENDPOINT}),
        replace(w1, state=MachineState.DEPLOY, material=Material(
            serial=1, minter=m1.id, requested_at=now, items=("token",), minted_at=now,
            expires_at=now + 900, values={"outputs.token.token": JOIN_TOKEN})),
        replace(m2, minting=MintJob(kind="revoke", joiner="gone", hostname="gone", ip="10.0.0.9",
                                    role="worker", serial=1, items=("forget-token",),
                                    values={"outputs.token.token": REVOKED_TOKEN}))])


async def test_a_read_only_token_reads_no_stored_secret_whatever_spec_it_renders(
        env: InProcessCoordinator) -> None:
    await stored_secrets(env)
    reader = await env.call("POST", "/v1/admin-tokens", 201,
                            json={"name": "grafana", "role": "read-only"})
    headers = {"Authorization": f"Bearer {reader['token']}"}
    stored = await env.call("GET", "/v1/clusters/edge/render?machine=w1", 200, headers=headers)
    assert items(stored["machines"][0])["deploy/join"]["argv"] == [  # values, secrets named
        "kubeadm", "join", ENDPOINT, "--token", "[secret ${outputs.token.token}]",
        "--discovery-token-ca-cert-hash", "[secret ${outputs.init.caCertHash}]"]

    for name, spec in (("every output public", ALL_PUBLIC), ("redeclared", REDECLARED)):
        for query in ("", "?machine=w1", "?machine=m2&phase=revoke"):
            answer = await env.call("POST", f"/v1/clusters/edge/render{query}", 200,
                                    data=spec, headers=headers)
            text = json.dumps(answer)
            assert [s for s in STORED_SECRETS if s in text] == [], (name, query)
            assert ENDPOINT in text, (name, query)  # public in both: shown
    redeclared = await env.call("POST", "/v1/clusters/edge/render?machine=w1", 200,
                                data=REDECLARED, headers=headers)
    assert items(redeclared["machines"][0])["deploy/show"]["env"] == {
        "TOKEN": "[secret ${outputs.token.token}]"}

    refused = await env.client.post("/v1/clusters/edge/render", data=MINTED_PUBLIC,
                                    headers=headers)
    text = await refused.text()
    assert refused.status == 422 and [s for s in STORED_SECRETS if s in text] == []
    assert json.loads(text)["error"].endswith(
        "machineTypes.manager[1].outputs[0].secret: join material is always secret (it "
        "joins a machine to the cluster): drop `secret: false`")
