"""The kubelet's and the container runtime's part, for the doubles' nodes.

- The kubelet double is a detached process (started by kubeadm's kubelet-start phase, or by
  `systemctl start|restart kubelet` once /var/lib/kubelet/config.yaml exists, as systemd
  would) that listens on port 10250 in the node's network namespace, as the real one does,
  until `kubeadm reset` or `systemctl stop kubelet` stops it.
- It runs the node's static pods (etc/kubernetes/manifests/*.yaml), each as a detached process
  of its own that outlives the kubelet as a container does: etcd is the real etcd with the
  manifest's command (absolute paths under the node's root, as hostPath mounts put them);
  kube-apiserver serves TLS on 6443 (apiserver.py); the other control-plane pods hold their
  port (10257, 10259). A pod whose manifest is
  removed is stopped; one that exits is started again (restartPolicy Always) with a back-off
  (1 s, doubling up to 30 s: kubelet's CrashLoopBackOff, shortened).
- Its heartbeat: every second it sets its Node's annotation doubles.nodeagent.test/heartbeat
  to the time, through the server its kubeconfig (/etc/kubernetes/kubelet.conf) names, over
  TLS checked against that kubeconfig's CA, as the real kubelet renews its Lease: a kubelet.conf
  naming an endpoint nothing answers at, or that the API server's certificate does not name,
  stops its heartbeats. Each change between working and failing is logged with the error.
- `crictl ps [--name NAME] [-q]` lists those pods' containers; `crictl exec ID etcdctl ...`
  runs the real etcdctl as the etcd container would (only etcd's own mounts, /etc/kubernetes/
  pki/etcd and /var/lib/etcd, exist in it; the image has no shell).

`python kubelet.py daemon|listen ADDR PORT`: the processes themselves.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

if __name__ == "__main__":  # run as a file: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).parents[3]))

from tests.support.k8s_doubles.common import (
    Failure,
    local,
    node_key,
    parse,
    procs_dir,
    running,
    spawn,
    state_dir,
    stop,
)

MANIFESTS = "/etc/kubernetes/manifests"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
PORTS = {"kube-controller-manager": ("127.0.0.1", 10257), "kube-scheduler": ("127.0.0.1", 10259)}
KUBELET_KUBECONFIG = "/etc/kubernetes/kubelet.conf"
HEARTBEAT = "doubles.nodeagent.test/heartbeat"  # the Node annotation each heartbeat sets
HEARTBEAT_SECONDS = 1.0
ETCD_MOUNTS = ("/etc/kubernetes/pki/etcd", "/var/lib/etcd")


def kubelet_name() -> str:
    return f"{node_key()}-kubelet"


def pod_name(pod: str) -> str:
    return f"{node_key()}-pod-{pod}"


def start_kubelet() -> bool:
    """Start the kubelet double (again), as `systemctl restart kubelet`: only with its config
    written (the real one exits at once without it). Whether it runs."""
    stop(kubelet_name())
    if not local(KUBELET_CONFIG).exists():
        return False
    log = state_dir() / "logs" / f"{kubelet_name()}.log"
    spawn(kubelet_name(), [sys.executable, __file__, "daemon"], log)
    deadline = time.time() + 10
    while time.time() < deadline:  # listening (or dead: the port was taken)
        if running(kubelet_name()) is None:
            return False
        if "listening" in log.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return True


def stop_kubelet() -> None:
    stop(kubelet_name())


def remove_containers() -> None:
    """Every static pod of this node stopped (kubeadm reset removes the containers)."""
    for path in procs_dir().glob(f"{node_key()}-pod-*.json"):
        stop(path.stem)


def mapped(value: str, mounts: tuple[str, ...] | None = None) -> str:
    """A path a pod names, where it is under the node's root: every absolute path (hostPath
    mounts), or only those under mounts (a container's own)."""
    flag, eq, path = value.partition("=") if value.startswith("--") else ("", "", value)
    if path.startswith("/") and (mounts is None or path.startswith(mounts)):
        path = str(local(path))
    return f"{flag}{eq}{path}"


def manifest(pod: str, command: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "kube-system"},
            "spec": {"hostNetwork": True, "containers": [{"name": pod, "command": command}]}}


def etcd_binary() -> str:
    """The real etcd, through a link named etcd-double: the test's nodes share one process
    table, and an agent's check for a previous installation (a process named etcd) must not
    see another node's etcd, as it would not on separate machines."""
    link = state_dir() / "bin" / "etcd-double"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            link.symlink_to(shutil.which("etcd") or "/usr/bin/etcd")
    return str(link)


def pod_argv(pod: str, spec: dict[str, Any]) -> list[str]:
    command = spec["spec"]["containers"][0]["command"]
    if pod == "etcd":
        return [etcd_binary(), *(mapped(a) for a in command[1:])]
    if pod == "kube-apiserver":
        return [sys.executable, str(Path(__file__).with_name("apiserver.py")),
                *(mapped(a) for a in command[1:])]
    address, port = PORTS[pod]
    return [sys.executable, __file__, "listen", address, str(port)]


def heartbeat(node: str) -> None:
    """One heartbeat through kubelet.conf's server (raises what the request raised)."""
    config = yaml.safe_load(local(KUBELET_KUBECONFIG).read_text())
    cluster = config["clusters"][0]["cluster"]
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cadata=ca)))
    patch = {"metadata": {"annotations": {HEARTBEAT: f"{time.time():.3f}"}}}
    request = urllib.request.Request(f"{cluster['server']}/api/v1/nodes/{node}",
                                     json.dumps(patch).encode(), method="PATCH",
                                     headers={"Content-Type": "application/merge-patch+json"})
    urllib.request.build_opener(*handlers).open(request, timeout=3).close()


def heartbeats() -> None:
    """Heartbeats while the kubelet runs, once kubelet.conf is there (a joining kubelet
    bootstraps first); each change of outcome logged."""
    node, last = socket.gethostname().lower(), ""
    while True:
        if local(KUBELET_KUBECONFIG).exists():
            try:
                heartbeat(node)
                outcome = "heartbeat: ok"
            except Exception as error:
                outcome = f"heartbeat failed: {error}"
            if outcome != last:
                print(f"{time.strftime('%H:%M:%S')} {outcome}", flush=True)
                last = outcome
        time.sleep(HEARTBEAT_SECONDS)


def daemon() -> None:
    """The kubelet: port 10250, its heartbeats, and the static pods kept running as their
    manifests say."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", 10250))
    except OSError as error:
        sys.exit(f"failed to listen on 0.0.0.0:10250: {error}")
    listener.listen(16)
    print("listening on 0.0.0.0:10250", flush=True)
    threading.Thread(target=heartbeats, daemon=True).start()
    backoff: dict[str, tuple[int, float]] = {}  # pod -> (starts, not again before)
    while True:
        manifests = {p.stem: p for p in local(MANIFESTS).glob("*.yaml")} \
            if local(MANIFESTS).is_dir() else {}
        for pod, path in manifests.items():
            starts, not_before = backoff.get(pod, (0, 0.0))
            if running(pod_name(pod)) is None and time.time() >= not_before:
                try:
                    spec = yaml.safe_load(path.read_text())
                    argv = pod_argv(pod, spec)
                except (yaml.YAMLError, KeyError, TypeError, IndexError):
                    continue  # being written: the next look
                spawn(pod_name(pod), argv, state_dir() / "logs" / f"{pod_name(pod)}.log")
                # CrashLoopBackOff, shortened: 1 s after the first exit, doubling up to 30 s.
                backoff[pod] = (starts + 1, time.time() + min(30.0, 2.0 ** starts))
        for path in procs_dir().glob(f"{node_key()}-pod-*.json"):
            if path.stem.removeprefix(f"{node_key()}-pod-") not in manifests:
                stop(path.stem)
        with contextlib.suppress(ChildProcessError):  # the pods that exited: reaped
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.3)


def listen(address: str, port: int) -> None:
    """A control-plane pod's port, held."""
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind((address, port))
    held.listen(16)
    while True:
        time.sleep(3600)


# -- crictl --------------------------------------------------------------------------------------

def container_id(pod: str) -> str:
    return hashlib.sha256(pod_name(pod).encode()).hexdigest()[:13]


def containers() -> dict[str, str]:
    """Running containers of this node: id -> pod."""
    found = {}
    for path in procs_dir().glob(f"{node_key()}-pod-*.json"):
        pod = path.stem.removeprefix(f"{node_key()}-pod-")
        if running(path.stem) is not None:
            found[container_id(pod)] = pod
    return found


def crictl(args: list[str]) -> dict[str, Any]:
    rest = list(args)
    while rest and rest[0].startswith("-"):  # global flags: --runtime-endpoint X, ...
        flag = rest.pop(0)
        if flag in ("--runtime-endpoint", "-r", "--image-endpoint", "-i", "--timeout", "-t") \
                and "=" not in flag and rest:
            rest.pop(0)
    if not rest:
        raise Failure("crictl: no command")
    command, rest = rest[0], rest[1:]
    if command == "ps":
        _, flags = parse(rest)
        listed = {i: p for i, p in containers().items()
                  if flags.get("--name") in (None, p)}
        for cid, pod in sorted(listed.items(), key=lambda kv: kv[1]):
            print(cid if "-q" in flags or "--quiet" in flags else f"{cid}  {pod}  Running")
        return {"containers": listed}
    if command == "exec":
        while rest and rest[0].startswith("-"):
            rest.pop(0)
        if len(rest) < 2:
            raise Failure("crictl exec: ID and a command are required")
        cid, argv = rest[0], rest[1:]
        pod = containers().get(cid)
        if pod is None:
            raise Failure(f"rpc error: code = NotFound desc = could not find container \"{cid}\"")
        if pod != "etcd" or argv[0] not in ("etcdctl", "etcd"):
            raise Failure("OCI runtime exec failed: exec failed: unable to start container "
                          f"process: exec: \"{argv[0]}\": executable file not found in $PATH: "
                          "unknown")
        done = subprocess.run([argv[0], *(mapped(a, ETCD_MOUNTS) for a in argv[1:])],
                              capture_output=True, text=True, check=False, timeout=60)
        sys.stdout.write(done.stdout)
        if done.returncode:
            raise Failure(done.stderr.strip())
        sys.stderr.write(done.stderr)
        return {"container": pod, "argv": argv}
    raise Failure(f"crictl: unknown command \"{command}\"")


if __name__ == "__main__":
    if sys.argv[1] == "daemon":
        daemon()
    else:
        listen(sys.argv[2], int(sys.argv[3]))
