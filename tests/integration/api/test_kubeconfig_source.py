"""Drains go through the kubeconfig a manager reports, so only the item that declares
`kubeconfigFrom` may bring one, under its own phase, while the machine's assignment holds it;
and the database keeps it sealed, never in the clear."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.support.builders import API_CLUSTER
from tests.support.harness import InProcessCoordinator, in_process_coordinator

SOURCE = {"name": "control-plane", "phase": "deploy", "kubeconfigFrom": "/etc/kubernetes/admin.conf",
          "action": {"type": "exec", "argv": ["true"]}}
SPEC = API_CLUSTER.replace(
    '{name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}',
    '{name: control-plane, phase: deploy, kubeconfigFrom: /etc/kubernetes/admin.conf, '
    'action: {type: exec, argv: ["true"]}}')
TOKEN = "kubeconfig-token-9f8e7d6c5b4a"
KUBECONFIG = ("apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
              "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
              f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n")


async def state(env: InProcessCoordinator, hostname: str) -> str:
    return str((await env.machine(hostname))["state"])


async def kubeconfig_of(env: InProcessCoordinator, hostname: str) -> str:
    (found,) = await env.store.machines_by_hostname(hostname)
    return found.kubeconfig


async def test_a_kubeconfig_comes_only_from_its_item_in_its_phase_while_assigned(
        tmp_path: Path) -> None:
    async with in_process_coordinator(tmp_path, SPEC) as env:
        m1 = await env.register("m1")
        await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})

        async def preparing() -> bool:
            return await state(env, "m1") == "Prepare"
        await env.until("m1 in Prepare", preparing)

        # In Prepare, the deploy item is not in m1's assignment: nothing it reports for it
        # becomes the kubeconfig drains would use.
        forged: dict[str, Any] = {"kubeconfig": KUBECONFIG}
        answer = await env.report(m1, SOURCE, "deploy", expect=409, **forged)
        assert re.fullmatch(r"item control-plane \(\w+\): not an item of the current "
                            r"assignment of m1 \(Prepare\)", answer["error"]), answer["error"]
        await env.report(m1, SOURCE, "prepare", expect=409, **forged)  # under another phase
        assert await kubeconfig_of(env, "m1") == ""

        async def deploying() -> bool:
            await env.report_all(m1)
            return await state(env, "m1") == "Deploy"
        await env.until("m1 in Deploy", deploying)
        await env.report(m1, SOURCE, "prepare", expect=409, **forged)  # still not its phase
        await env.report(m1, SOURCE, "deploy", **forged)  # its item, its phase, assigned now
        assert await kubeconfig_of(env, "m1") == KUBECONFIG

        stored = b"".join(path.read_bytes() for path in tmp_path.glob("coordinator.db*"))
        assert stored and TOKEN.encode() not in stored, "the kubeconfig is stored in the clear"
