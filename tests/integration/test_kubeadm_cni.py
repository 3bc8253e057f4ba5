"""The kubeadm profile's `cni` item, as the first manager's agent renders it, run again and
again against the doubles (tests/support/k8s_doubles), as a retried item or a CNI version
bump runs it on a running cluster: every run succeeds and leaves the plugin at the item's
version. The cilium double refuses `cilium install` over a release that is there, as Helm
under the real CLI does, so the item must upgrade it then."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from coordinator.domain.views.fleet import Fleet, hypothetical_fleet
from nodeagent.wire.protocol import ProxySettings
from tests.support.k8s_doubles.calls import Call, agent_env, calls
from tests.support.kubeadm_profile import profile_spec, rendered, run_exec_item

PROXY = "http://proxy.test:3128"


def cni_item(cni: str) -> dict[str, Any]:
    """The first manager's cni item, rendered, with the cluster's proxy set."""
    spec = profile_spec(cni=cni)
    spec = spec.model_copy(update={"settings": spec.settings.model_copy(update={
        "proxy": ProxySettings(http=PROXY, https=PROXY, no_proxy=["10.0.0.0/8"])})})
    machines = hypothetical_fleet(spec, Fleet(1, 1))
    return rendered(spec, machines[0], machines, "deploy")["cni"]


def bumped(item: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """item with one of its versions (an argument of its script) changed, as a new profile."""
    return {**item, "argv": [new if a == old else a for a in item["argv"]]}


def run(item: dict[str, Any], root: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_exec_item(item, root, agent_env(tmp / "log", tmp / "state", "http://127.0.0.1:9"))


def cilium_calls(tmp: Path) -> list[Call]:
    return [c for c in calls(tmp / "log") if c.command == "cilium"]


def test_the_cilium_double_refuses_an_install_over_a_release_and_an_upgrade_of_none(
        tmp_path: Path) -> None:
    env = {**os.environ, **agent_env(tmp_path / "log", tmp_path / "state", "http://127.0.0.1:9")}

    def cilium(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["cilium", *argv], env=env, cwd=tmp_path,
                              capture_output=True, text=True, check=False, timeout=60)

    upgrade = cilium("upgrade", "--version", "1.16.5")
    assert (upgrade.returncode, upgrade.stderr.strip()) == (
        1, 'Error: Unable to upgrade Cilium: "cilium" has no deployed releases')
    assert cilium("install", "--version", "1.16.5").returncode == 0
    again = cilium("install", "--version", "1.16.5")
    assert (again.returncode, again.stderr.strip()) == (
        1, "Error: Unable to install Cilium: cannot re-use a name that is still in use")
    assert cilium("upgrade", "--version", "1.17.0").returncode == 0
    assert [c.details.get("release") for c in cilium_calls(tmp_path) if c.exit == 0] == [
        {"revision": 1, "version": "1.16.5"}, {"revision": 2, "version": "1.17.0"}]


def test_cilium_is_installed_when_absent_and_upgraded_when_there_through_the_proxy(
        tmp_path: Path) -> None:
    """A retried item and a version bump both find the release there: `cilium install` again
    would fail for ever (it did); the item upgrades it instead."""
    root = tmp_path / "root"
    root.mkdir()
    item = cni_item("cilium")
    version = item["argv"][-1]
    runs = [run(item, root, tmp_path), run(item, root, tmp_path),
            run(bumped(item, version, "1.17.0"), root, tmp_path)]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    done = cilium_calls(tmp_path)
    assert [(c.argv[0], c.details["release"]) for c in done] == [
        ("install", {"revision": 1, "version": version}),
        ("upgrade", {"revision": 2, "version": version}),
        ("upgrade", {"revision": 3, "version": "1.17.0"})]
    assert all(c.proxy["https_proxy"] == PROXY for c in done)


def test_calico_is_fetched_through_the_proxy_and_applied_the_same_way_each_run(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    item = cni_item("calico")
    version = item["argv"][-2]
    runs = [run(item, root, tmp_path), run(bumped(item, version, "v3.30.0"), root, tmp_path)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    log = calls(tmp_path / "log")
    assert [c.argv[-1] for c in log if c.command == "curl"] == [
        f"https://raw.githubusercontent.com/projectcalico/calico/{v}/manifests/calico-typha.yaml"
        for v in (version, "v3.30.0")]
    assert all(c.proxy == {"http_proxy": PROXY, "https_proxy": PROXY, "no_proxy": "10.0.0.0/8"}
               for c in log if c.command == "curl")
    applied = [c.argv for c in log if c.command == "kubectl"]
    assert applied == 2 * [["apply", "--server-side", "--force-conflicts", "-f",
                            "etc/kubernetes/nodeagent/calico.yaml"]]
