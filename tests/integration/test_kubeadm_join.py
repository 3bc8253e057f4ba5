"""The kubeadm profile's deploy items as the agents render them, run in fake roots with the test
doubles first in PATH and the test Kubernetes API server on loopback: the first manager's init
and the endpoint it gives the joiners, then a worker whose first token expired after its join
configuration was written joins with the token minted again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.fleet import Fleet, hypothetical_fleet
from coordinator.domain.model import ClusterSpec, Machine
from tests.support.k8s_doubles.calls import agent_env, calls
from tests.support.kubeadm_profile import (
    deployed,
    profile_spec,
    rendered,
    run_exec_item,
    write_file_item,
)
from tests.support.kubeapi import kube_api_server


def apply(action: dict[str, Any], root: Path, env: dict[str, str]) -> str:
    """What the agent does with a rendered item in root, which must succeed; an exec's output."""
    if action["type"] == "file":
        write_file_item(action, root)
        return ""
    done = run_exec_item(action, root, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def phases_script(spec: ClusterSpec, machines: list[Machine]) -> dict[str, Any]:
    """The prepare item writing phases.sh, which init and join run."""
    return rendered(spec, machines[0], machines, "prepare")["phases-script"]


def outputs(printed: str, item: str) -> dict[str, str]:
    """`NAME=value` lines an item printed, as `item.NAME`."""
    return {f"{item}.{k}": v for k, _, v in (line.partition("=") for line in printed.splitlines())
            if k in ("caCertHash", "endpoint", "token")}


def test_a_token_minted_again_replaces_the_expired_one_the_join_configuration_holds(
        tmp_path: Path) -> None:
    spec = profile_spec()
    machines = hypothetical_fleet(spec, Fleet(1, 1))
    manager, worker = tmp_path / "manager", tmp_path / "worker"
    with kube_api_server() as api:
        env = agent_env(tmp_path / "log", tmp_path / "state", api.url)
        deploy = rendered(spec, machines[0], machines, "deploy")
        manager.mkdir()
        apply(phases_script(spec, machines), manager, env)
        apply(deploy["init-config"], manager, env)
        produced = outputs(apply(deploy["init"], manager, env), "init")
        assert produced["init.endpoint"] == f"{machines[0].ip}:6443"

        def minted() -> str:
            return apply({"type": "exec", "argv": ["kubeadm", "token", "create", "--ttl", "60s"]},
                         manager, env).strip()

        first, again = minted(), minted()
        apply({"type": "exec", "argv": ["kubeadm", "token", "delete", first]}, manager, env)

        def holding(token: str) -> list[Any]:
            return deployed(machines, produced, lambda m: {"outputs.token.token": token})

        worker.mkdir()
        apply(phases_script(spec, machines), worker, env)
        apply(rendered(spec, holding(first)[1], holding(first), "deploy")["join-config"], worker, env)
        apply(rendered(spec, holding(again)[1], holding(again), "deploy")["join"], worker, env)
        with api.locked() as cluster:
            node = cluster.nodes["worker-1"]

    (join,) = [c for c in calls(tmp_path / "log") if c.is_("kubeadm", "join")]
    assert join.details["token"] == again and join.details["controlPlane"] is False
    assert f'token: "{again}"' in (worker / "etc/kubernetes/nodeagent/join.yaml").read_text()
    assert node["metadata"]["labels"]["nodeagent.io/machine-id"] == machines[1].id
    assert node["spec"]["providerID"] == f"nodeagent://k8s/{machines[1].id}"


@pytest.mark.parametrize(("setting", "endpoint", "written"), [
    (None, "192.0.2.1:6443", '"192.0.2.1:6443"'),
    ("k8s-api.test", "k8s-api.test:6443", '"k8s-api.test"'),
    ("[fd00::10]:7443", "[fd00::10]:7443", '"[fd00::10]:7443"')])
def test_init_gives_the_joiners_an_endpoint_with_a_port(
        tmp_path: Path, setting: str | None, endpoint: str, written: str) -> None:
    """No setting: the first manager's address, written into init.yaml too; a setting without
    a port: kubeadm's 6443 added for the joiners."""
    spec = profile_spec(control_plane_endpoint=setting)
    machines = hypothetical_fleet(spec, Fleet(1, 0))
    deploy = rendered(spec, machines[0], machines, "deploy")
    with kube_api_server() as api:
        env = agent_env(tmp_path / "log", tmp_path / "state", api.url)
        apply(phases_script(spec, machines), tmp_path, env)
        apply(deploy["init-config"], tmp_path, env)
        assert outputs(apply(deploy["init"], tmp_path, env), "init")["init.endpoint"] == endpoint
    config = (tmp_path / "etc/kubernetes/nodeagent/init.yaml").read_text()
    assert f"controlPlaneEndpoint: {written}" in config
