"""The kubeadm profile's deploy items as the agents render them, run in fake roots on nodes of a
LAN (network namespaces, each machine at its LAN address) with the test doubles first in PATH
and the test Kubernetes API server on the hub: the first manager's init
and the endpoint it gives the joiners, then a worker whose first token expired after its join
configuration was written joins with the token minted again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.fleet import Fleet, hypothetical_fleet
from coordinator.domain.model import Machine
from tests.support.k8s_doubles.calls import calls
from tests.support.k8s_doubles.control import doubled_lan
from tests.support.kubeadm_profile import (
    deployed,
    profile_spec,
    rendered,
    run_exec_item,
    write_file_item,
)
from tests.support.lan import Lan


def apply(action: dict[str, Any], root: Path, env: dict[str, str],
          prefix: list[str] | None = None) -> str:
    """What the agent does with a rendered item in root (on the node prefix runs it on), which
    must succeed; an exec's output."""
    if action["type"] == "file":
        write_file_item(action, root)
        return ""
    done = run_exec_item(action, root, env, prefix or [])
    assert done.returncode == 0, done.stderr
    return done.stdout


def outputs(printed: str, item: str) -> dict[str, str]:
    """`NAME=value` lines an item printed, as `item.NAME`."""
    return {f"{item}.{k}": v for k, _, v in (line.partition("=") for line in printed.splitlines())
            if k in ("caCertHash", "endpoint", "token")}


def on_the_lan(machines: list[Machine], network: Lan) -> list[Machine]:
    """The machines at their nodes' addresses."""
    return [replace(m, ip=node.ip) for m, node in zip(machines, network.nodes, strict=True)]


def test_a_token_minted_again_replaces_the_expired_one_the_join_configuration_holds(
        tmp_path: Path) -> None:
    spec = profile_spec()
    manager, worker = tmp_path / "manager", tmp_path / "worker"
    with doubled_lan(["manager-1", "worker-1"], tmp_path) as (network, env, api):
        machines = on_the_lan(hypothetical_fleet(spec, Fleet(1, 1)), network)
        on_manager, on_worker = (n.ns.argv([]) for n in network.nodes)
        deploy = rendered(spec, machines[0], machines, "deploy")
        manager.mkdir()
        apply(deploy["init-config"], manager, env)
        produced = outputs(apply(deploy["init"], manager, env, on_manager), "init")
        assert produced["init.endpoint"] == f"{machines[0].ip}:6443"

        def minted() -> str:
            return apply({"type": "exec", "argv": ["kubeadm", "token", "create", "--ttl", "60s"]},
                         manager, env, on_manager).strip()

        first, again = minted(), minted()
        apply({"type": "exec", "argv": ["kubeadm", "token", "delete", first]}, manager, env,
              on_manager)

        def holding(token: str) -> list[Any]:
            return deployed(machines, produced, lambda m: {"outputs.token.token": token})

        worker.mkdir()
        apply(rendered(spec, holding(first)[1], holding(first), "deploy")["join-config"], worker, env)
        apply(rendered(spec, holding(again)[1], holding(again), "deploy")["join"], worker, env,
              on_worker)
        with api.locked() as cluster:
            node = cluster.nodes["worker-1"]

    (join,) = [c for c in calls(tmp_path / "log") if c.is_("kubeadm", "join")]
    assert join.details["token"] == again and join.details["controlPlane"] is False
    assert f'token: "{again}"' in (worker / "etc/kubernetes/nodeagent/join.yaml").read_text()
    assert node["metadata"]["labels"]["nodeagent.io/machine-id"] == machines[1].id
    assert node["spec"]["providerID"] == f"nodeagent://k8s/{machines[1].id}"


@pytest.mark.parametrize(("setting", "endpoint", "written"), [
    (None, "{ip}:6443", '"{ip}:6443"'),
    ("k8s-api.test", "k8s-api.test:6443", '"k8s-api.test"'),
    ("[fd00::10]:7443", "[fd00::10]:7443", '"[fd00::10]:7443"')])
def test_init_gives_the_joiners_an_endpoint_with_a_port(
        tmp_path: Path, setting: str | None, endpoint: str, written: str) -> None:
    """No setting: the first manager's address, written into init.yaml too; a setting without
    a port: kubeadm's 6443 added for the joiners."""
    spec = profile_spec(control_plane_endpoint=setting)
    root = tmp_path / "root"
    root.mkdir()
    with doubled_lan(["manager-1"], tmp_path) as (network, env, _):
        machines = on_the_lan(hypothetical_fleet(spec, Fleet(1, 0)), network)
        deploy = rendered(spec, machines[0], machines, "deploy")
        apply(deploy["init-config"], root, env)
        produced = outputs(apply(deploy["init"], root, env, network.nodes[0].ns.argv([])), "init")
    assert produced["init.endpoint"] == endpoint.format(ip=machines[0].ip)
    config = (root / "etc/kubernetes/nodeagent/init.yaml").read_text()
    assert f"controlPlaneEndpoint: {written.format(ip=machines[0].ip)}" in config
