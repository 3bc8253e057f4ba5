"""Per-machine values through the API as an operator and an agent meet them: labels and the
cluster address chosen at approval, labels changed later (the agent's next assignment carries
them). Every refusal names the field or label and stores nothing."""

from __future__ import annotations

from typing import Any

from tests.support.builders import API_CLUSTER, node_facts
from tests.support.harness import InProcessCoordinator

# API_CLUSTER with Kubernetes settings and a worker item that names per-machine values.
CLUSTER = API_CLUSTER.replace(
    "settings: {", "settings: {kubernetes: {podSubnet: 10.50.0.0/16, labels: {env: prod}}, "
    ).replace(
    '    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}',
    '    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}\n'
    '    - {name: storage, phase: prepare, action: {type: exec, argv: [store, '
    '"${machine.labels.zone}", "${machine.devices}", "${machine.interface}", '
    '"${cluster.labels.env}", "${kubernetes.podSubnet}"]}}')


async def values_of(env: InProcessCoordinator, hostname: str) -> dict[str, str]:
    values: dict[str, str] = (await env.assignment(env.agents[hostname]))["values"]
    return values


async def events_of(env: InProcessCoordinator, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await env.call("GET", f"/v1/events?kind={kind}", 200)
    return found


async def test_approval_gives_labels_and_the_address_of_the_interface_named(
        env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=CLUSTER)
    await env.register("w1", facts=node_facts())
    assert (await env.machine("w1"))["ip"] == "127.0.0.1"  # what its agent registered with

    approved = await env.call("POST", "/v1/machines/w1/approve", 200, json={
        "role": "worker", "labels": {"zone": "eu-1a", "example.com/gpu": ""},
        "interface": "eth1"})
    assert (approved["ip"], approved["interface"], approved["labels"]) == (
        "10.10.0.5", "eth1", {"zone": "eu-1a", "example.com/gpu": ""})
    await env.coordinator.reconciler.reconcile_once()

    values = await values_of(env, "w1")
    assert {name: values[name] for name in (
        "machine.ip", "machine.interface", "machine.labels", "machine.labels.zone",
        "machine.devices", "cluster.labels.env", "kubernetes.podSubnet")} == {
        "machine.ip": "10.10.0.5", "machine.interface": "eth1",
        "machine.labels": "example.com/gpu=,zone=eu-1a", "machine.labels.zone": "eu-1a",
        "machine.devices": "/dev/sdb", "cluster.labels.env": "prod",
        "kubernetes.podSubnet": "10.50.0.0/16"}
    (listed,) = await env.machines()
    assert listed["labels"] == {"zone": "eu-1a", "example.com/gpu": ""}
    detail = await env.machine("w1")
    assert [d["name"] for d in detail["facts"]["block_devices"]] == ["sda", "sdb", "sdc", "sr0", "sdd"]


async def test_an_ip_must_be_one_the_node_reported_and_a_refusal_lists_them(
        env: InProcessCoordinator) -> None:
    await env.register("w1", facts=node_facts())
    refused = await env.call("POST", "/v1/machines/w1/approve", 409,
                             json={"role": "worker", "ip": "10.10.0.9"})
    assert refused["error"] == ("ip: 10.10.0.9 is not an address of w1 (its addresses: eth0 "
                                "192.0.2.10, eth1 10.10.0.5, eth1 fd10::5)")
    refused = await env.call("POST", "/v1/machines/w1/approve", 409,
                             json={"role": "worker", "interface": "eth2"})
    assert refused["error"].startswith("interface: interface eth2 of w1 has no IPv4 address")
    both = await env.call("POST", "/v1/machines/w1/approve", 422,
                          json={"interface": "eth1", "ip": "10.10.0.5"})
    assert both["error"] == "invalid document: give interface or ip, not both"
    machine = await env.machine("w1")
    assert (machine["approved"], machine["ip"]) == (False, "127.0.0.1")  # nothing stored

    approved = await env.call("POST", "/v1/machines/w1/approve", 200,
                              json={"role": "worker", "ip": "10.10.0.5"})
    assert (approved["ip"], approved["interface"]) == ("10.10.0.5", "eth1")


async def test_a_bad_label_is_refused_naming_it_and_nothing_is_approved(
        env: InProcessCoordinator) -> None:
    await env.register("w1")
    refused = await env.call("POST", "/v1/machines/w1/approve", 422, json={
        "role": "worker", "labels": {"zone": "eu west"}})
    assert refused["problems"] == [{"path": "labels", "line": None, "message": (
        "label zone: its value 'eu west' must be empty or 1 to 63 characters: letters, digits, "
        "'-', '_' or '.', beginning and ending with a letter or digit")}]
    assert not (await env.machine("w1"))["approved"]


async def test_a_label_change_reaches_the_agents_next_assignment_and_is_audited(
        env: InProcessCoordinator) -> None:
    await env.call("PUT", "/v1/clusters", 200, data=CLUSTER)
    agent = await env.register("w1", facts=node_facts())
    await env.call("POST", "/v1/machines/w1/approve", 200,
                   json={"role": "worker", "labels": {"zone": "eu-1a", "rack": "r1"}})
    await env.coordinator.reconciler.reconcile_once()
    held = (await env.assignment(agent))["generation"]

    changed = await env.call("PATCH", "/v1/machines/w1/labels", 200,
                             json={"set": {"zone": "eu-1b", "pool": "big"}, "remove": ["rack"]})
    assert changed["labels"] == {"zone": "eu-1b", "pool": "big"}
    woken = await env.assignment(agent, after=held, wait=1)
    assert woken["generation"] > held
    assert (woken["values"]["machine.labels.zone"], woken["values"]["machine.labels"]) == (
        "eu-1b", "pool=big,zone=eu-1b")
    (labelled,) = await events_of(env, "labels")
    assert labelled["message"] == "w1 labels: pool=big,zone=eu-1b"
    assert (await events_of(env, "audit"))[-1]["data"]["path"] == "/v1/machines/w1/labels"

    # Removing a label it lacks is nothing to do: no new assignment.
    await env.call("PATCH", "/v1/machines/w1/labels", 200, json={"remove": ["rack"]})
    assert (await env.assignment(agent))["generation"] == woken["generation"]


async def test_a_bad_label_change_is_refused_naming_the_label(env: InProcessCoordinator) -> None:
    await env.register("w1")
    refused = await env.call("PATCH", "/v1/machines/w1/labels", 422,
                             json={"set": {"zone": "a"}, "remove": ["zone", "Bad/x"]})
    assert refused["error"] == (
        "invalid document: label key 'Bad/x': its prefix 'Bad' must be a DNS subdomain "
        "(lowercase letters, digits, '-' and '.') of at most 253 characters; label zone is both "
        "set and removed: choose one")
    assert (await env.machine("w1"))["labels"] == {}
