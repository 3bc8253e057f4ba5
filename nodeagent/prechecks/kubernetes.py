"""A node must not carry a previous Kubernetes installation: kubeadm and etcd refuse to start over it."""

from __future__ import annotations

from nodeagent.host import Host, Listener, ProcessInfo
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed

CONFIG_FILES = (
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
    "/etc/kubernetes/super-admin.conf",
)
MANIFEST_DIR = "/etc/kubernetes/manifests"
DATA_DIRS = ("/var/lib/kubelet", "/var/lib/etcd")
PROCESSES = frozenset({"kubelet", "kube-apiserver", "etcd", "kube-controller-manager",
                       "kube-scheduler", "kube-proxy"})
# kubeadm's Port-N checks: a control plane's (init, a manager's join) and the kubelet's.
PORTS = {6443: "kube-apiserver", 10250: "kubelet", 10257: "kube-controller-manager",
         10259: "kube-scheduler", 2379: "etcd client", 2380: "etcd peer"}


def leftover_files(host: Host) -> list[str]:
    found = [path for path in CONFIG_FILES if host.exists(path)]
    found += [f"{MANIFEST_DIR}/{name}" for name in host.listdir(MANIFEST_DIR)]
    found += [f"{path} (not empty)" for path in DATA_DIRS if host.listdir(path)]
    return found


def leftover_processes(processes: list[ProcessInfo]) -> list[str]:
    return sorted({f"{p.name} (pid {p.pid})" for p in processes if p.name in PROCESSES})


def ports_in_use(listeners: list[Listener]) -> list[str]:
    return sorted({f"{s.port}/{s.protocol} ({PORTS[s.port]})" for s in listeners
                   if s.protocol == "tcp" and s.port in PORTS})


def evaluate(files: list[str], processes: list[str], ports: list[str]) -> Outcome:
    if not (files or processes or ports):
        return passed("no previous Kubernetes installation found")
    parts = []
    if files:
        parts.append("files: " + ", ".join(files))
    if processes:
        parts.append("processes: " + ", ".join(processes))
    if ports:
        parts.append("ports in use: " + ", ".join(ports))
    return failed(
        "previous Kubernetes installation found; " + "; ".join(parts),
        "reset the node first (`kubeadm reset -f`, stop kubelet/etcd, remove /etc/kubernetes, "
        "/var/lib/kubelet and /var/lib/etcd), or use a clean machine",
        files=files,
        processes=processes,
        ports=ports,
    )


async def run(ctx: CheckContext) -> Outcome:
    return evaluate(
        leftover_files(ctx.host),
        leftover_processes(await ctx.processes()),
        ports_in_use(await ctx.listeners()),
    )
