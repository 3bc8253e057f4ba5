from __future__ import annotations

from nodeagent.host import Host, Listener, ProcessInfo
from nodeagent.prechecks.kubernetes import (
    evaluate,
    leftover_files,
    leftover_processes,
    ports_in_use,
)
from nodeagent.wire.protocol import Status
from tests.support.roots import RootTree


def proc(pid: int, name: str) -> ProcessInfo:
    return ProcessInfo(pid, name, f"/usr/bin/{name}", (f"/usr/bin/{name}",))


def test_clean_machine_has_no_leftovers(root_tree: RootTree) -> None:
    root_tree.mkdir("/etc/kubernetes/manifests")
    root_tree.mkdir("/var/lib/kubelet")
    root_tree.mkdir("/var/lib/etcd")
    root_tree.write("/etc/kubernetes/something-else.txt", "not a kubeconfig")
    assert leftover_files(Host(root_tree.path)) == []


def test_kubeconfigs_manifests_and_data_dirs_are_found(root_tree: RootTree) -> None:
    root_tree.write("/etc/kubernetes/admin.conf", "apiVersion: v1\n")
    root_tree.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\n")
    root_tree.write("/etc/kubernetes/manifests/kube-apiserver.yaml", "kind: Pod\n")
    root_tree.write("/etc/kubernetes/manifests/etcd.yaml", "kind: Pod\n")
    root_tree.write("/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n")
    root_tree.mkdir("/var/lib/etcd/member")
    assert leftover_files(Host(root_tree.path)) == [
        "/etc/kubernetes/admin.conf",
        "/etc/kubernetes/kubelet.conf",
        "/etc/kubernetes/manifests/etcd.yaml",
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
        "/var/lib/kubelet (not empty)",
        "/var/lib/etcd (not empty)",
    ]


def test_kubernetes_processes_are_named_with_their_pid() -> None:
    processes = [proc(1, "systemd"), proc(812, "kubelet"), proc(900, "etcd"),
                 proc(901, "kubectl"), proc(902, "kubelet-helper")]
    assert leftover_processes(processes) == ["etcd (pid 900)", "kubelet (pid 812)"]


def test_only_tcp_listeners_on_kubernetes_ports_count() -> None:
    listeners = [
        Listener("tcp", "0.0.0.0", 6443, 10),
        Listener("tcp", "::", 6443, 10),
        Listener("tcp", "127.0.0.1", 2379, 11),
        Listener("udp", "0.0.0.0", 10250, 12),
        Listener("tcp", "0.0.0.0", 8080, 13),
    ]
    assert ports_in_use(listeners) == ["2379/tcp (etcd client)", "6443/tcp (kube-apiserver)"]


def test_nothing_left_passes() -> None:
    outcome = evaluate([], [], [])
    assert outcome.status is Status.PASS
    assert outcome.message == "no previous Kubernetes installation found"


def test_leftovers_fail_listing_what_was_found_and_how_to_reset() -> None:
    outcome = evaluate(
        ["/etc/kubernetes/admin.conf"], ["kubelet (pid 812)"], ["10250/tcp (kubelet)"]
    )
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "previous Kubernetes installation found; files: /etc/kubernetes/admin.conf; "
        "processes: kubelet (pid 812); ports in use: 10250/tcp (kubelet)"
    )
    assert outcome.remedy.startswith("reset the node first (`kubeadm reset -f`")
    assert outcome.data == {
        "files": ["/etc/kubernetes/admin.conf"],
        "processes": ["kubelet (pid 812)"],
        "ports": ["10250/tcp (kubelet)"],
    }


def test_only_the_kinds_found_are_mentioned(root_tree: RootTree) -> None:
    root_tree.write("/var/lib/etcd/member/snap/db", "")
    outcome = evaluate(leftover_files(Host(root_tree.path)), [], [])
    assert outcome.status is Status.FAIL
    assert outcome.message == "previous Kubernetes installation found; files: /var/lib/etcd (not empty)"


def test_the_controller_managers_and_schedulers_ports_count_too() -> None:
    """kubeadm's Port-10257 and Port-10259 checks: a control plane's own ports."""
    listeners = [Listener("tcp", "127.0.0.1", 10257, 20), Listener("tcp", "::", 10259, 21)]
    assert ports_in_use(listeners) == ["10257/tcp (kube-controller-manager)",
                                       "10259/tcp (kube-scheduler)"]
