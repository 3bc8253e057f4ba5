"""Test doubles of the host-changing commands the kubeadm profile calls (`doubles.py NAME ARG...`,
run through the `double` links of this directory): they simulate what a test needs of the real
tools, record every call, and change nothing outside the caller's working directory.

- Every call is appended to $K8S_DOUBLES_LOG as a JSON line: host (the UTS hostname, i.e. the
  machine), command, argv, start, end, exit, what it did (`details`: the token a join used...)
  and the proxy variables it was given.
- Exec items run with the agent's root as working directory, so an absolute path
  (/etc/kubernetes/admin.conf) means that path under the working directory.
- What kubeadm keeps in the cluster (bootstrap tokens with their expiry, revocations, the
  uploaded certificate key, the CA, the control plane's version) lives in $K8S_DOUBLES_STATE,
  shared by every node of a test, under a lock.
- `kubeadm init` and `kubeadm join` register the Node in the test Kubernetes API server
  ($K8S_DOUBLES_API, tests/support/kubeapi.py) as a kubelet does: named by its
  nodeRegistration, with the labels and providerID of its kubeletExtraArgs, Ready. A join checks
  what kubeadm checks (the token exists, has not expired nor been deleted, the CA hash is
  pinned, a control-plane join's certificate key is the uploaded one) and fails like kubeadm.
- kubectl remembers the images set on Deployments (`set image`) to answer `get deployment`.
- modprobe and sysctl change the root's /proc/sys as the kernel does (sysfs.py).
- Every other command (systemctl, apt-get, ...) is recorded and succeeds.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import string
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sysfs import Failure as KernelFailure
from sysfs import modprobe, sysctl

Details = dict[str, Any]
# Flags that take a value (the others are switches): enough for the profile's calls.
VALUED = {"--config", "--ttl", "--description", "--certificate-key", "--kubeconfig", "-o",
          "--output", "-n", "--namespace", "-f", "--filename", "--version", "--set"}
JOIN_SECONDS = 0.5  # how long init and join take: long enough to see two overlap
CERT_KEY_SECONDS = 7200  # kubeadm deletes the uploaded certificates after two hours
PROXY = {"http_proxy", "https_proxy", "no_proxy"}  # recorded as the command got them


class Failure(Exception):
    """The command fails, printing this (exit status 1)."""


def local(path: str) -> Path:
    """Where a path the command was given is: absolute ones under the working directory."""
    return Path.cwd() / path.lstrip("/") if path.startswith("/") else Path(path)


def parse(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Positional words, and flags (`--x=v`, `--x v` for VALUED flags, `--switch` as "")."""
    words: list[str] = []
    flags: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            flags[name] = value if eq else next(rest, "") if name in VALUED else ""
        else:
            words.append(arg)
    return words, flags


@contextlib.contextmanager
def state() -> Iterator[dict[str, Any]]:
    """The shared state (the cluster as kubeadm keeps it), locked while in use, saved after."""
    directory = Path(os.environ["K8S_DOUBLES_STATE"])
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "state.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = directory / "state.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        yield data
        path.write_text(json.dumps(data, indent=1))


# -- the cluster's CA ----------------------------------------------------------------------------

def cluster_ca(data: dict[str, Any]) -> str:
    """The cluster CA's certificate (PEM), made by the first init."""
    if "ca" not in data:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        data["ca"] = cert.public_bytes(serialization.Encoding.PEM).decode()
    return str(data["ca"])


def ca_hash(pem: str) -> str:
    """kubeadm's pin: sha256 of the CA's SubjectPublicKeyInfo."""
    spki = x509.load_pem_x509_certificate(pem.encode()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def write_node_files(ca: str, control_plane: bool) -> None:
    """What kubeadm leaves on a node: the CA, the kubelet's kubeconfig, on a control plane the
    admin kubeconfig (to the test API server) and a static pod manifest."""
    kubeconfig = json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "kubernetes", "cluster": {"server": os.environ["K8S_DOUBLES_API"]}}],
        "users": [{"name": "admin", "user": {"token": f"double-admin-{secrets.token_hex(8)}"}}],
        "contexts": [{"name": "admin", "context": {"cluster": "kubernetes", "user": "admin"}}]})
    files = {"/etc/kubernetes/pki/ca.crt": ca, "/etc/kubernetes/kubelet.conf": kubeconfig}
    if control_plane:
        files.update({"/etc/kubernetes/admin.conf": kubeconfig,
                      "/etc/kubernetes/manifests/kube-apiserver.yaml": "kind: Pod\n"})
    for path, text in files.items():
        local(path).parent.mkdir(parents=True, exist_ok=True)
        local(path).write_text(text)


# -- the kubelet's part: registering the Node ----------------------------------------------------

def register_node(registration: dict[str, Any]) -> Details:
    """POST the Node as its kubelet would: the name, the labels and providerID of its
    kubeletExtraArgs (v1beta4's list of name/value), NotReady until a network plugin runs on
    it (tests/support/k8s_doubles/network.py plays the CNI's part)."""
    extra = registration.get("kubeletExtraArgs") or []
    args = {a["name"]: a["value"] for a in extra} if isinstance(extra, list) else dict(extra)
    labels = dict(pair.split("=", 1) for pair in args.get("node-labels", "").split(",") if pair)
    name = registration.get("name") or socket.gethostname()
    node = {"metadata": {"name": name, "labels": labels},
            "spec": {"providerID": args["provider-id"]} if "provider-id" in args else {},
            "status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "message": "container runtime network not ready: NetworkReady=false "
                           "reason:NetworkPluginNotReady message:Network plugin returns error: "
                           "cni plugin not initialized"}]}}
    request = urllib.request.Request(f"{os.environ['K8S_DOUBLES_API']}/api/v1/nodes",
                                     json.dumps(node).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with contextlib.suppress(urllib.error.HTTPError):  # 409: registered before, as a kubelet finds
        urllib.request.urlopen(request, timeout=10).close()
    return {"node": name, "labels": labels, "providerID": args.get("provider-id"),
            "taints": registration.get("taints")}


# -- kubeadm -------------------------------------------------------------------------------------

def documents(path: str) -> dict[str, dict[str, Any]]:
    """A kubeadm config file's documents by kind."""
    found = local(path)
    if not found.exists():
        raise Failure(f"unable to read config from {path!r} : open {path}: no such file or directory")
    return {d["kind"]: d for d in yaml.safe_load_all(found.read_text()) if d}


def require_control_plane() -> None:
    if not local("/etc/kubernetes/admin.conf").exists():
        raise Failure("failed to load admin kubeconfig: open /etc/kubernetes/admin.conf: "
                      "no such file or directory")


def kubeadm_init(words: list[str], flags: dict[str, str]) -> Details:
    if local("/etc/kubernetes/manifests/kube-apiserver.yaml").exists():
        raise Failure("[preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-"
                      "kubernetes-manifests-kube-apiserver.yaml]: /etc/kubernetes/manifests/"
                      "kube-apiserver.yaml already exists")
    config = documents(flags["--config"])
    init, cluster = config["InitConfiguration"], config["ClusterConfiguration"]
    time.sleep(JOIN_SECONDS)
    with state() as data:
        data["cluster"] = {"version": cluster["kubernetesVersion"].lstrip("v"),
                           "endpoint": cluster.get("controlPlaneEndpoint") or "",
                           "podSubnet": cluster.get("networking", {}).get("podSubnet")}
        write_node_files(cluster_ca(data), control_plane=True)
        if "--upload-certs" in flags:
            key = flags.get("--certificate-key") or secrets.token_hex(32)
            data["certkey"] = {"key": key, "expires": time.time() + CERT_KEY_SECONDS}
            print(f"[upload-certs] Using certificate key:\n{key}")
        details = {"cluster": data["cluster"]}
    print("Your Kubernetes control-plane has initialized successfully!")
    return {**details, **register_node(init.get("nodeRegistration", {}))}


def kubeadm_join(words: list[str], flags: dict[str, str]) -> Details:
    mixed = sorted(f.lstrip("-") for f in flags if f != "--config")
    if "--config" in flags and mixed:
        raise Failure(f"can not mix '--config' with arguments {mixed}")
    if local("/etc/kubernetes/kubelet.conf").exists():
        raise Failure("[preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-"
                      "kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists")
    join = documents(flags["--config"])["JoinConfiguration"]
    discovery = join["discovery"]["bootstrapToken"]
    token, plane = discovery["token"], join.get("controlPlane")
    with state() as data:
        found = data.get("tokens", {}).get(token)
        token_id = token.split(".")[0]
        if found is None or found["deleted"]:
            raise Failure("error execution phase preflight: couldn't validate the identity of the "
                          f"API Server: could not find a JWS signature in the cluster-info "
                          f"ConfigMap for token ID \"{token_id}\"")
        if time.time() >= found["expires"]:
            raise Failure(f"error execution phase preflight: the bootstrap token \"{token_id}\" "
                          "has expired")
        pinned = ca_hash(cluster_ca(data))
        if pinned not in discovery.get("caCertHashes", []):
            raise Failure(f"error execution phase preflight: cluster CA found in cluster-info "
                          f"ConfigMap is invalid: none of the public keys \"{pinned}\" are pinned")
        if with_port(discovery["apiServerEndpoint"]) != with_port(data["cluster"]["endpoint"]):
            raise Failure(f"error execution phase preflight: Get \"https://"
                          f"{discovery['apiServerEndpoint']}/api/v1/namespaces/kube-public/"
                          "configmaps/cluster-info\": connection refused")
        if plane is not None:
            uploaded = data.get("certkey")
            if not uploaded or uploaded["key"] != plane.get("certificateKey") \
                    or time.time() >= uploaded["expires"]:
                raise Failure("error execution phase control-plane-prepare/download-certs: error "
                              "downloading certs: error decoding secret data with provided key: "
                              "cipher: message authentication failed")
        ca = cluster_ca(data)
    time.sleep(JOIN_SECONDS)
    write_node_files(ca, control_plane=plane is not None)
    print("This node has joined the cluster")
    return {"token": token, "controlPlane": plane is not None,
            "certificateKey": (plane or {}).get("certificateKey"),
            **register_node(join.get("nodeRegistration", {}))}


def with_port(endpoint: str) -> str:
    """host[:port] with kubeadm's default port when it names none."""
    return endpoint if re.search(r":\d+$", endpoint) else f"{endpoint}:6443"


def duration(text: str) -> float:
    """A Go duration as kubeadm's --ttl takes it: 900s, 15m, 1h30m."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise Failure(f"invalid argument \"{text}\" for \"--ttl\" flag: time: invalid duration")
    return sum(float(n) * units[u] for n, u in parts)


def kubeadm_token(words: list[str], flags: dict[str, str]) -> Details:
    require_control_plane()
    alphabet = string.ascii_lowercase + string.digits
    with state() as data:
        tokens = data.setdefault("tokens", {})
        if words[1] == "create":
            token = ("".join(secrets.choice(alphabet) for _ in range(6)) + "."
                     + "".join(secrets.choice(alphabet) for _ in range(16)))
            ttl = duration(flags.get("--ttl", "24h"))
            tokens[token] = {"expires": time.time() + ttl, "ttl": ttl, "deleted": False,
                             "description": flags.get("--description", "")}
            print(token)
            return {"token": token, "ttl": ttl, "description": flags.get("--description", "")}
        if words[1] == "delete":
            for token in words[2:]:
                if token not in tokens:
                    raise Failure(f"bootstrap token \"{token.split('.')[0]}\" not found")
                tokens[token]["deleted"] = True
                print(f"bootstrap token \"{token.split('.')[0]}\" deleted")
            return {"deleted": words[2:]}
    raise Failure(f"unknown command \"{words[1]}\" for \"kubeadm token\"")


def kubeadm_upload_certs(words: list[str], flags: dict[str, str]) -> Details:
    require_control_plane()
    key = flags.get("--certificate-key") or secrets.token_hex(32)
    with state() as data:
        data["certkey"] = {"key": key, "expires": time.time() + CERT_KEY_SECONDS}
    print(f"[upload-certs] Storing the certificates in Secret \"kubeadm-certs\"\n"
          f"[upload-certs] Using certificate key:\n{key}")
    return {"certificateKey": key}


def kubeadm_upgrade(words: list[str], flags: dict[str, str]) -> Details:
    with state() as data:
        cluster = data["cluster"]
        if words[1] == "apply":
            require_control_plane()
            cluster["version"] = words[2].lstrip("v")
            print(f"[upgrade/successful] SUCCESS! Your cluster was upgraded to \"{words[2]}\".")
        elif not local("/etc/kubernetes/kubelet.conf").exists():
            raise Failure("couldn't create a Kubernetes client from file "
                          "\"/etc/kubernetes/kubelet.conf\": no such file or directory")
        return {"version": cluster["version"]}


def kubeadm_reset(words: list[str], flags: dict[str, str]) -> Details:
    for path in ("/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd"):
        shutil.rmtree(local(path), ignore_errors=True)
    print("[reset] Deleted contents of the etcd data directory: /var/lib/etcd")
    return {}


def kubeadm(args: list[str]) -> Details:
    words, flags = parse(args)
    handlers: dict[tuple[str, ...], Callable[[list[str], dict[str, str]], Details]] = {
        ("init", "phase", "upload-certs"): kubeadm_upload_certs, ("init",): kubeadm_init,
        ("join",): kubeadm_join, ("token",): kubeadm_token, ("upgrade",): kubeadm_upgrade,
        ("reset",): kubeadm_reset, ("certs", "certificate-key"): lambda w, f: certificate_key(),
    }
    for prefix, handler in handlers.items():  # the longest prefixes first, as written
        if tuple(words[:len(prefix)]) == prefix:
            return handler(words, flags)
    raise Failure(f"unknown command {words!r} for \"kubeadm\"")


def certificate_key() -> Details:
    key = secrets.token_hex(32)
    print(key)
    return {"certificateKey": key}


# -- kubectl, kubelet, the rest ------------------------------------------------------------------

def kubectl(args: list[str]) -> Details:
    words, flags = parse(args)
    if words[:2] == ["set", "image"]:
        name = words[2].removeprefix("deployment/")
        image = words[3].split("=", 1)[1]
        with state() as data:
            data.setdefault("deployments", {})[name] = image
        return {"deployment": name, "image": image}
    if words[:2] == ["get", "deployment"]:
        with state() as data:
            image = data.get("deployments", {}).get(words[2])
        if image is None:
            raise Failure(f"Error from server (NotFound): deployments.apps \"{words[2]}\" not found")
        print(image)
        return {"deployment": words[2]}
    return {"files": flags.get("-f")} if words[:1] == ["apply"] else {}


def kubelet(args: list[str]) -> Details:
    if "--version" in args:
        with state() as data:
            print(f"Kubernetes v{data.get('cluster', {}).get('version', '0.0.0')}")
    return {}


HANDLERS: dict[str, Callable[[list[str]], Details]] = {
    "kubeadm": kubeadm, "kubectl": kubectl, "kubelet": kubelet, "modprobe": modprobe,
    "sysctl": sysctl}


def record(entry: dict[str, Any]) -> None:
    with Path(os.environ["K8S_DOUBLES_LOG"]).open("a") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.write(json.dumps(entry) + "\n")


def main(argv: list[str]) -> int:
    command, args = argv[1], argv[2:]
    start, code, details = time.time(), 0, {}
    try:
        details = HANDLERS.get(command, lambda a: {})(args)
    except (Failure, KernelFailure) as failure:
        print(failure, file=sys.stderr)
        code = 1
    record({"host": socket.gethostname(), "command": command, "argv": args,
            "cwd": str(Path.cwd()), "start": start, "end": time.time(), "exit": code,
            "details": details, "proxy": {k: v for k, v in os.environ.items() if k in PROXY}})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
