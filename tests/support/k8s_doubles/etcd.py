"""The stacked etcd of the doubles' control planes: Debian's real etcd (3.4) and etcdctl.

kubeadm's etcd phase writes the etcd static pod's manifest (the command below: client
https://IP:2379 and https://127.0.0.1:2379, peer https://IP:2380, TLS with the certs phase's
pki/etcd/, data in var/lib/etcd); the kubelet double runs it. A control-plane join adds its
member as a learner through the members the cluster knows, starts its etcd with
initial-cluster-state existing, then promotes it, as kubeadm's control-plane-join etcd step
does; `kubeadm reset` removes the node's member through them. The cluster's etcd endpoints
(what kubeadm reads from the etcd pods' annotations) are kept in the shared state."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PKI = "/etc/kubernetes/pki"
DATA_DIR = "/var/lib/etcd"
CLIENT_CERT = "apiserver-etcd-client"  # what kubeadm's own etcd client uses


def host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def client_url(ip: str) -> str:
    return f"https://{host_port(ip, 2379)}"


def peer_url(ip: str) -> str:
    return f"https://{host_port(ip, 2380)}"


def command(name: str, ip: str, initial: str | None = None) -> list[str]:
    """The etcd container's command, kubeadm's flags: a new cluster of this member alone, or
    (initial: NAME=PEER,... from `member add`) joining an existing one."""
    loopback = "::1" if ":" in ip else "127.0.0.1"
    argv = ["etcd", f"--name={name}", f"--advertise-client-urls={client_url(ip)}",
            f"--listen-client-urls={client_url(loopback)},{client_url(ip)}",
            f"--listen-peer-urls={peer_url(ip)}", f"--initial-advertise-peer-urls={peer_url(ip)}",
            f"--data-dir={DATA_DIR}", f"--cert-file={PKI}/etcd/server.crt",
            f"--key-file={PKI}/etcd/server.key", f"--trusted-ca-file={PKI}/etcd/ca.crt",
            "--client-cert-auth=true", f"--peer-cert-file={PKI}/etcd/peer.crt",
            f"--peer-key-file={PKI}/etcd/peer.key", f"--peer-trusted-ca-file={PKI}/etcd/ca.crt",
            "--peer-client-cert-auth=true", "--snapshot-count=10000",
            f"--listen-metrics-urls=http://{host_port(loopback, 2381)}"]
    if initial is None:
        return [*argv, f"--initial-cluster={name}={peer_url(ip)}"]
    return [*argv, f"--initial-cluster={initial}", "--initial-cluster-state=existing"]


def etcdctl(root: Path, endpoints: Sequence[str], *args: str, cert: str = CLIENT_CERT,
            timeout: float = 5, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """The real etcdctl against endpoints with a node's certificates (root: the node's root;
    cert: a client pair under pki/, e.g. etcd/healthcheck-client; prefix: e.g. `ip netns exec
    NS`, to run it in the node's network namespace)."""
    pki = root / PKI.lstrip("/")
    return subprocess.run(
        [*prefix, "etcdctl", f"--endpoints={','.join(endpoints)}", f"--cacert={pki}/etcd/ca.crt",
         f"--cert={pki}/{cert}.crt", f"--key={pki}/{cert}.key", "--dial-timeout=2s",
         f"--command-timeout={timeout:.0f}s", *args],
        capture_output=True, text=True, check=False, timeout=timeout + 10,
        env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})


def members(root: Path, endpoints: Sequence[str], cert: str = CLIENT_CERT,
            prefix: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The member list as the first answering endpoint sees it: name, ID (hex), peer URLs,
    isLearner. Raises RuntimeError with etcdctl's error when none answers."""
    done = etcdctl(root, endpoints, "member", "list", "-w", "json", cert=cert, prefix=prefix)
    if done.returncode:
        raise RuntimeError(done.stderr.strip() or done.stdout.strip())
    return [{"name": m.get("name", ""), "id": f"{m['ID']:x}", "peerURLs": m.get("peerURLs", []),
             "clientURLs": m.get("clientURLs", []), "isLearner": bool(m.get("isLearner"))}
            for m in json.loads(done.stdout).get("members", [])]


def wait_healthy(root: Path, endpoint: str, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if etcdctl(root, [endpoint], "endpoint", "health", timeout=2).returncode == 0:
            return True
        time.sleep(0.2)
    return False


def add_learner(root: Path, endpoints: Sequence[str], name: str, ip: str,
                timeout: float = 40) -> str:
    """`member add --learner` through the cluster's members, retried while etcd refuses (an
    unhealthy cluster: a member added just before still connecting), as kubeadm retries; a
    member with this peer URL already there (an earlier attempt) is taken. The initial cluster
    (NAME=PEER,...) the new member starts with. Raises RuntimeError with etcdctl's error."""
    deadline, error = time.time() + timeout, "no attempt"
    while time.time() < deadline:
        try:
            listed = members(root, endpoints)
        except RuntimeError as failed:
            error = str(failed)
        else:
            if any(peer_url(ip) in m["peerURLs"] for m in listed):
                return ",".join(f"{m['name'] or name}={m['peerURLs'][0]}" for m in listed)
            done = etcdctl(root, endpoints, "member", "add", name, f"--peer-urls={peer_url(ip)}",
                           "--learner")
            if done.returncode == 0:
                for line in done.stdout.splitlines():
                    if line.startswith("ETCD_INITIAL_CLUSTER="):
                        return line.split("=", 1)[1].strip('"')
            error = done.stderr.strip()
        time.sleep(0.5)
    raise RuntimeError(error)


def promote(root: Path, endpoints: Sequence[str], ip: str, timeout: float) -> None:
    """The learner with ip's peer URL promoted to a voting member once it caught up (etcd
    refuses a learner not yet in sync: kubeadm retries). Raises RuntimeError."""
    deadline, error = time.time() + timeout, "no attempt"
    while time.time() < deadline:
        found = [m for m in members(root, endpoints) if peer_url(ip) in m["peerURLs"]]
        if not found:
            raise RuntimeError(f"no member with peer URL {peer_url(ip)}")
        if not found[0]["isLearner"]:
            return
        done = etcdctl(root, endpoints, "member", "promote", found[0]["id"])
        if done.returncode == 0:
            return
        error = done.stderr.strip()
        time.sleep(0.3)
    raise RuntimeError(error)


def remove(root: Path, endpoints: Sequence[str], peer: str) -> str | None:
    """kubeadm reset's removal of this node's member (its peer URL, peer) through the cluster's
    members: None when done (or nothing to do: gone already, or the last member), else the
    error, which reset only warns about."""
    try:
        listed = members(root, endpoints)
        if len(listed) == 1 and peer in listed[0]["peerURLs"]:
            return None  # the only member left: nothing to tell anyone
        mine = [m for m in listed if peer in m["peerURLs"]]
        if not mine:
            return None
        done = etcdctl(root, endpoints, "member", "remove", mine[0]["id"])
        return done.stderr.strip() if done.returncode else None
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as error:
        return str(error)
