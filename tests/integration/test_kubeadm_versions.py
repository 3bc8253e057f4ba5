"""Every machine ends at the Kubernetes version its release says, whatever phase it was in when
the version changed: a real coordinator on SQLite plans, and each machine's items are the
kubeadm profile's package items (keyed by the version) and upgrade items, applied by the agent's
own item code in a root of its own against the doubles (apt-get records what it installed).
w1 prepared at 1.33.4 and waits in Prepare for a deployed manager; m1 is in Deploy at 1.33.4;
then the cluster moves to 1.34.1. w1 installs 1.34.1 and waits (saying so) until m1, which
joined on 1.33.4's packages, upgraded: both end with kubeadm, kubelet and kubectl 1.34.1. And
a forced downgrade takes every machine's packages down; nothing else does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.domain.model import MachineTypes
from coordinator.domain.specs.specs import load_spec
from nodeagent.items.exec import run_exec
from nodeagent.items.file import apply_file
from nodeagent.items.outcome import ItemFailed
from nodeagent.wire.protocol import ExecAction, FileAction, StateItem
from tests.support.builders import spec_text
from tests.support.harness import InProcessCoordinator, in_process_coordinator
from tests.support.k8s_doubles.calls import agent_env, installed
from tests.support.kubeadm_profile import PROFILE
from tests.support.roots import OS_RELEASE_DEBIAN_12

# The profile's items this takes: its package script and package items, and the upgrade items
# that install packages; a deploy item that leaves the kubelet.conf of a joined node stands for
# init and join.
TAKEN = ("packages-script", "kubernetes-packages", "upgrade-kubeadm", "upgrade-kubelet")
JOIN = StateItem.model_validate({"name": "join", "phase": "deploy", "action": {
    "type": "exec", "argv": ["sh", "-c", "mkdir -p etc/kubernetes && : > etc/kubernetes/kubelet.conf"]}})


def spec_at(version: str) -> str:
    """The profile's package items at version (and release version), named `lab`."""
    spec = load_spec(PROFILE.read_text().replace('"1.33.4"', f'"{version}"'))
    types = MachineTypes(**{role: [*(i for i in getattr(spec.machine_types, role)
                                     if i.name in TAKEN), JOIN] for role in ("manager", "worker")})
    settings = spec.settings.model_copy(update={"drain": spec.settings.drain.model_copy(
        update={"enabled": False})})  # no Kubernetes API here: upgraded in place
    return spec_text(spec.model_copy(update={"name": "lab", "machine_types": types,
                                             "settings": settings}))


@pytest.fixture
async def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> AsyncIterator[InProcessCoordinator]:
    for name, value in agent_env(tmp_path / "log", tmp_path / "state", "http://127.0.0.1:9").items():
        monkeypatch.setenv(name, value)  # the items' commands find the doubles first
    async with in_process_coordinator(tmp_path, spec_at("1.33.4")) as running:
        yield running


async def agent_runs(env: InProcessCoordinator, hostname: str, root: Path,
                     journal: set[str], hold: str = "") -> None:
    """hostname's agent applies its assignment, but the item named hold: each item its journal
    does not hold (the same item at another version it runs again) run in root, then
    reported."""
    agent = env.agents[hostname]
    current = await env.assignment(agent)
    for raw in current["items"]:
        item = StateItem.model_validate(raw)
        if item.name == hold or item.fingerprint() in journal:
            continue
        if isinstance(item.action, FileAction):
            apply_file(item.action, current["values"], root)
        else:
            assert isinstance(item.action, ExecAction)
            try:
                await run_exec(item.action, current["values"], root, 60, lambda _: None)
            except ItemFailed as failed:
                raise AssertionError(f"{hostname}: {item.name}: {failed} {failed.output}") from None
        journal.add(item.fingerprint())
        await env.report(agent, raw, raw["phase"])


Roots = dict[str, Path]
Journals = dict[str, set[str]]


async def approved(env: InProcessCoordinator, tmp_path: Path) -> tuple[Roots, Journals]:
    """m1 (manager) and w1 (worker) registered and approved, each with a Debian root."""
    roots = {hostname: tmp_path / hostname for hostname in ("m1", "w1")}
    for hostname, role in (("m1", "manager"), ("w1", "worker")):
        (roots[hostname] / "etc").mkdir(parents=True)
        (roots[hostname] / "etc/os-release").write_text(OS_RELEASE_DEBIAN_12)
        await env.register(hostname)
        await env.call("POST", f"/v1/machines/{hostname}/approve", 200, json={"role": role})
    return roots, {hostname: set() for hostname in roots}


async def at_release(env: InProcessCoordinator, roots: Roots, journals: Journals, release: str,
                     notes: list[str] | None = None) -> None:
    """Every agent applies what it is given until both machines are Ready at release; notes
    collects w1's on the way."""
    async def settled() -> bool:
        for hostname, root in roots.items():
            await agent_runs(env, hostname, root, journals[hostname])
        found = [await env.machine(h) for h in roots]
        if notes is not None:
            notes.append(found[1]["note"]["text"])
        return [(m["state"], m["release"]) for m in found] == [("Ready", release)] * 2

    # Each item runs the doubles' processes: seconds each on a loaded machine.
    await env.until(f"both Ready at {release}", settled, timeout=120)


async def test_machines_in_prepare_and_deploy_end_at_the_new_version(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    roots, journals = await approved(env, tmp_path)

    async def held() -> bool:
        """m1 in Deploy, its deploy item held; w1 prepared, waiting for a deployed manager."""
        await agent_runs(env, "m1", roots["m1"], journals["m1"], hold="join")
        await agent_runs(env, "w1", roots["w1"], journals["w1"])
        states = [(await env.machine(h))["state"] for h in roots]
        return states == ["Deploy", "Prepare"] and len(journals["w1"]) == 2

    await env.until("m1 in Deploy, w1 prepared", held, timeout=120)
    assert installed(tmp_path / "state", roots["w1"])["kubelet"] == "1.33.4"

    await env.call("PUT", "/v1/clusters", 200, data=spec_at("1.34.1"))

    notes: list[str] = []  # w1's, while it waits
    await at_release(env, roots, journals, "1.34.1", notes)
    assert "prepared; waits for the control plane to reach Kubernetes 1.34.1: manager m1 runs " \
        "1.33.4, and a kubelet never joins an older API server; the managers upgrade first" \
        in notes, "w1 joined a control plane older than its kubelet"
    for hostname, root in roots.items():
        assert installed(tmp_path / "state", root) == {
            "kubeadm": "1.34.1", "kubelet": "1.34.1", "kubectl": "1.34.1"}, hostname
        assert (await env.machine(hostname))["kubernetes"] == "1.34.1"
    upgrades = await env.call("GET", "/v1/events?cluster=lab&kind=state", 200)
    assert any("m1 Ready -> Upgrade" in e["message"] and "prepare/kubernetes-packages, "
               "upgrade/upgrade-kubeadm" in e["message"] for e in upgrades), \
        "m1 joined on 1.33.4's packages and did not upgrade"


async def test_only_a_forced_downgrade_takes_the_packages_down(
        env: InProcessCoordinator, tmp_path: Path) -> None:
    """Refused without --allow-downgrade; forced, every machine's upgrade items install the
    older packages (apt-get given --allow-downgrades, which it would refuse them without)."""
    roots, journals = await approved(env, tmp_path)
    await at_release(env, roots, journals, "1.33.4")
    await env.call("PUT", "/v1/clusters", 422, data=spec_at("1.33.2"))
    await env.call("PUT", "/v1/clusters?allowDowngrade=true", 200, data=spec_at("1.33.2"))
    await at_release(env, roots, journals, "1.33.2")
    for hostname, root in roots.items():
        assert installed(tmp_path / "state", root) == {
            "kubeadm": "1.33.2", "kubelet": "1.33.2", "kubectl": "1.33.2"}, hostname
