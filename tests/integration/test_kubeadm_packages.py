"""The kubeadm profile's package items, as a machine's agent renders them, run against a fake
root per distribution with the test doubles first in PATH: which package manager each family
gets, the Kubernetes repository of the version's minor, exact versions, never older than what
is installed unless the downgrade was forced (cluster apply --allow-downgrade), and the
cluster's proxy (empty settings unset, not empty)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.fleet import Fleet
from coordinator.domain.views.rendering import render_cluster
from tests.support.k8s_doubles.calls import Call, agent_env, calls, installed
from tests.support.kubeadm_profile import PROFILE, run_exec_item, write_file_item
from tests.support.roots import OS_RELEASE_DEBIAN_12

PROXY = "http://proxy.test:3128"
ROCKY_9 = 'NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n'


def prepare_items(version: str = "1.33.4", forced: bool = False) -> dict[str, dict[str, Any]]:
    """A worker's prepare items, rendered, with the cluster's http(s) proxy set and no noProxy,
    at version (forced: as a downgrade the operator forced, which the coordinator records)."""
    text = PROFILE.read_text().replace("proxy: {http: null, https: null, noProxy: []}",
                                       f"proxy: {{http: {PROXY}, https: {PROXY}, noProxy: []}}")
    text = text.replace('version: &kubernetes "1.33.4"', f'version: &kubernetes "{version}"'
                        + ("\n    allowDowngrade: true" if forced else ""))
    rendering = render_cluster(load_spec(text), [], Fleet(1, 1), machine="worker-1",
                               phase="prepare")
    return {i.name: i.action for p in rendering.machines[0].phases for i in p.items}


def run(root: Path, tmp: Path, os_release: str, *names: str, version: str = "1.33.4",
        forced: bool = False) -> tuple[list[Call], list[str]]:
    """The items named, in a root with this os-release (the script written by its file item
    first), their calls as the doubles recorded them and each item's output."""
    items = prepare_items(version, forced)
    write_file_item(items["packages-script"], root)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text(os_release)
    env = agent_env(tmp / "log", tmp / "state", "http://127.0.0.1:9")
    outputs = [run_exec_item(items[name], root, env) for name in names]
    return calls(tmp / "log"), [f"{o.returncode} {o.stdout}{o.stderr}" for o in outputs]


def test_debian_gets_containerd_io_and_pinned_kubernetes_packages_through_apt_and_the_proxy(
        tmp_path: Path) -> None:
    """containerd.io from the Docker repository: Debian 12's containerd is 1.6, which
    Kubernetes 1.36 no longer runs (containerd 2.0 or later)."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "kubelet=1.33.4-1.1").touch()  # a file a shell glob would put in place of the pattern
    log, outputs = run(root, tmp_path, OS_RELEASE_DEBIAN_12, "containerd", "kubernetes-packages")
    assert [o[0] for o in outputs] == ["0", "0"], outputs
    assert [c.argv for c in log if c.command == "apt-get" and "install" in c.argv] == [
        ["install", "-y", "-o", "Dpkg::Options::=--force-confold", "containerd.io"],
        ["install", "-y", "--allow-change-held-packages",
         "kubeadm=1.33.4-*", "kubelet=1.33.4-*", "kubectl=1.33.4-*"]]
    assert [c.argv for c in log if c.command == "apt-mark"] == [["hold", "kubeadm", "kubelet", "kubectl"]]
    assert [c.argv[-1] for c in log if c.command == "curl"] == [
        "https://download.docker.com/linux/debian/gpg",
        "https://pkgs.k8s.io/core:/stable:/v1.33/deb/Release.key"]
    assert (root / "etc/apt/sources.list.d/docker.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/docker.gpg] "
        "https://download.docker.com/linux/debian bookworm stable\n")
    assert (root / "etc/apt/sources.list.d/kubernetes.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/kubernetes-v1.33.gpg] "
        "https://pkgs.k8s.io/core:/stable:/v1.33/deb/ /\n")
    assert not [c for c in log if c.command == "dnf"]
    # The proxy as set, and no_proxy unset rather than empty.
    assert all(c.proxy == {"http_proxy": PROXY, "https_proxy": PROXY} for c in log)


def test_the_rhel_family_gets_them_through_dnf_from_the_versions_repository(tmp_path: Path) -> None:
    """Rocky, like RHEL and Alma, ships no containerd: containerd.io from the Docker repository
    for the family (centos; rhel for RHEL itself), which the script writes."""
    root = tmp_path / "root"
    root.mkdir()
    log, outputs = run(root, tmp_path, ROCKY_9, "containerd", "kubernetes-packages")
    assert [o[0] for o in outputs] == ["0", "0"], outputs
    docker = (root / "etc/yum.repos.d/docker-ce.repo").read_text()
    assert "baseurl=https://download.docker.com/linux/centos/$releasever/$basearch/stable\n" in docker
    assert "gpgcheck=1\ngpgkey=https://download.docker.com/linux/centos/gpg\n" in docker
    assert [c.argv for c in log if c.command == "dnf"] == [
        ["install", "-y", "containerd.io"],
        ["install", "-y", "--disableexcludes=kubernetes", "kubeadm-1.33.4", "kubelet-1.33.4",
         "kubectl-1.33.4"]]
    repo = (root / "etc/yum.repos.d/kubernetes.repo").read_text()
    assert "baseurl=https://pkgs.k8s.io/core:/stable:/v1.33/rpm/\n" in repo
    assert "exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni\n" in repo
    assert not [c for c in log if c.command.startswith("apt")]


@pytest.mark.parametrize(("os_release", "source"), [
    ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n',
     "etc/apt/sources.list.d/docker.list:deb [signed-by=/etc/apt/keyrings/docker.gpg] "
     "https://download.docker.com/linux/ubuntu noble stable"),
    ('ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"\n',
     "etc/yum.repos.d/docker-ce.repo:baseurl=https://download.docker.com/linux/rhel/"),
    ('ID="almalinux"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n',
     "etc/yum.repos.d/docker-ce.repo:baseurl=https://download.docker.com/linux/centos/"),
    ('ID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="9"\n',
     "etc/yum.repos.d/docker-ce.repo:baseurl=https://download.docker.com/linux/centos/"),
    ('ID=fedora\nVERSION_ID=42\n',
     "etc/yum.repos.d/docker-ce.repo:baseurl=https://download.docker.com/linux/fedora/"),
])
def test_every_supported_distribution_gets_containerd_io_from_its_docker_repository(
        tmp_path: Path, os_release: str, source: str) -> None:
    """The README's systems, each from the repository the Docker project publishes for it."""
    root = tmp_path / "root"
    root.mkdir()
    log, outputs = run(root, tmp_path, os_release, "containerd")
    assert outputs[0].startswith("0"), outputs
    path, line = source.split(":", 1)
    assert line in (root / path).read_text()
    installed = [c.argv for c in log if c.command in ("apt-get", "dnf") and "install" in c.argv]
    assert len(installed) == 1 and installed[0][-1] == "containerd.io"


@pytest.mark.parametrize("os_release", ['ID=alpine\n', 'ID=opensuse-leap\nID_LIKE="suse opensuse"\n'])
def test_another_distribution_is_refused_naming_it_and_nothing_is_installed(
        tmp_path: Path, os_release: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    log, outputs = run(root, tmp_path, os_release, "kubernetes-packages")
    assert outputs[0].startswith("1 unsupported distribution ")
    assert os_release.split("\n")[0].removeprefix("ID=") in outputs[0]
    assert log == []


@pytest.mark.parametrize("os_release", [OS_RELEASE_DEBIAN_12, ROCKY_9], ids=["debian", "rocky"])
def test_packages_go_up_with_the_version_and_down_only_when_the_downgrade_was_forced(
        tmp_path: Path, os_release: str) -> None:
    """apt-get refuses an older version unless given --allow-downgrades, and dnf installs one
    without a word: the script passes the flag, or lets dnf go down, only when the coordinator
    recorded the downgrade as forced (${kubernetes.allowDowngrade})."""
    root = tmp_path / "root"
    root.mkdir()
    state = tmp_path / "state"
    kubernetes = {"kubeadm": "1.34.1", "kubelet": "1.34.1", "kubectl": "1.34.1"}
    for version in ("1.33.4", "1.34.1"):
        outputs = run(root, tmp_path, os_release, "kubernetes-packages", version=version)[1]
        assert outputs[0].startswith("0 "), outputs
    assert installed(state, root) == kubernetes

    outputs = run(root, tmp_path, os_release, "kubernetes-packages", version="1.33.4")[1]
    assert outputs[0].startswith("1 "), outputs
    assert ("--allow-downgrades" if os_release == OS_RELEASE_DEBIAN_12
            else "kubeadm 1.34.1 is installed, newer than 1.33.4: not downgraded") in outputs[0]
    assert installed(state, root) == kubernetes, "a package went down"

    outputs = run(root, tmp_path, os_release, "kubernetes-packages", version="1.33.4",
                  forced=True)[1]
    assert outputs[0].startswith("0 "), outputs
    assert installed(state, root) == {name: "1.33.4" for name in kubernetes}
@pytest.mark.parametrize(("os_release", "install"), [
    (OS_RELEASE_DEBIAN_12, ["apt-get", "install", "-y", "haproxy"]),
    (ROCKY_9, ["dnf", "install", "-y", "haproxy"])])
def test_every_family_gets_haproxy_from_its_distribution_for_the_local_api_proxy(
        tmp_path: Path, os_release: str, install: list[str]) -> None:
    """The local endpoint of the API (apiserver-proxy.sh) runs the distribution's haproxy."""
    root = tmp_path / "root"
    root.mkdir()
    log, outputs = run(root, tmp_path, os_release, "apiserver-proxy-package")
    assert outputs[0].startswith("0"), outputs
    assert [[c.command, *c.argv] for c in log if "install" in c.argv] == [install]
    assert all(c.proxy == {"http_proxy": PROXY, "https_proxy": PROXY} for c in log)
