"""The kubeadm double, read against kubeadm's own source (cmd/kubeadm/app/cmd/phases/{init,join,
reset}, preflight/checks.go, phases/upgrade/policy.go, phases/etcd/local.go).

- `kubeadm init` runs kubeadm's phases in kubeadm's order (INIT_PHASES), each writing its files
  when it runs; `kubeadm join` likewise (JOIN_PHASES). `kubeadm init|join phase NAME` runs one
  phase, `--skip-phases a,b` leaves phases out. What the cluster keeps appears only at its
  phase: the cluster version (kubeadm-config) at upload-config, the uploaded certificates at
  upload-certs (with --upload-certs), cluster-info and the default token (what a join's
  discovery needs) at bootstrap-token.
- Preflight refuses leftovers with kubeadm's check names and messages (FileAvailable--...,
  DirAvailable--var-lib-etcd, Port-N) and honours --ignore-preflight-errors (and
  nodeRegistration.ignorePreflightErrors; `all`).
- kubelet-start starts the kubelet double (kubelet.py: port 10250, the static pods, so the
  etcd phase's manifest becomes a real etcd); a control-plane join adds its etcd member.
- Bootstrap tokens (24h unless --ttl) and the uploaded certificates (2 hours) expire against
  the shared state's clock (common.now; tests move it with control.advance).
- `kubeadm upgrade apply vX` enforces kubeadm's version policy; `kubeadm upgrade node`
  quietly follows the cluster's configured version.
- `kubeadm reset` removes the node's etcd member through the cluster's members, and only warns
  (exit 0) when it cannot; stops the kubelet and the static pods; deletes kubeadm's files;
  leaves iptables alone and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.k8s_doubles import etcd, kubelet, pki
from tests.support.k8s_doubles.common import Failure, boundary, local, now, parse, state

Details = dict[str, Any]
INIT_PHASES = ["preflight", "certs", "kubeconfig", "etcd", "control-plane", "kubelet-start",
               "wait-control-plane", "upload-config", "upload-certs", "mark-control-plane",
               "bootstrap-token", "kubelet-finalize", "addon", "show-join-command"]
# v1.32 on: etcd-join is a phase of its own, before control-plane-join (mark-control-plane).
JOIN_PHASES = ["preflight", "control-plane-prepare", "kubelet-start", "etcd-join", "control-plane-join",
               "wait-control-plane"]
# Flags kubeadm accepts beside --config (the others: "can not mix '--config' with arguments").
WITH_CONFIG = {"--config", "--ignore-preflight-errors", "--skip-phases", "--dry-run", "--v",
               "--upload-certs", "--certificate-key", "--skip-token-print", "--patches",
               "--skip-certificate-key-print", "--kubeconfig", "--node-name"}
SLEEP_SECONDS = 0.5  # how long a control plane takes to come up: long enough to see overlaps
TOKEN_TTL = 24 * 3600.0  # kubeadm's default
CERT_KEY_SECONDS = 7200.0  # kubeadm deletes the uploaded certificates after two hours
KUBECONFIGS = ["admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf",
               "scheduler.conf"]
CONTROL_PLANE = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
CLUSTER_CAS = {"ca": ("ca", "kubernetes"), "front-proxy-ca": ("front_proxy_ca", "front-proxy-ca"),
               "etcd/ca": ("etcd_ca", "etcd-ca")}


@dataclass
class Run:
    """One `kubeadm init|join` (or one phase of it)."""
    workflow: str
    flags: dict[str, str]
    docs: dict[str, dict[str, Any]]
    node: str
    ip: str
    control_plane: bool
    details: Details = field(default_factory=dict)

    @property
    def registration(self) -> dict[str, Any]:
        kind = "InitConfiguration" if self.workflow == "init" else "JoinConfiguration"
        return dict(self.docs.get(kind, {}).get("nodeRegistration") or {})


# -- files ---------------------------------------------------------------------------------------

def write(path: str, text: str, mode: int = 0o644) -> None:
    target = local(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def write_pair(name: str, pair: pki.Pair) -> None:
    write(f"/etc/kubernetes/pki/{name}.crt", pair["cert"])
    write(f"/etc/kubernetes/pki/{name}.key", pair["key"], 0o600)


def kubeconfig(user: str) -> str:
    """A kubeconfig to the test API server (the coordinator reads admin.conf's)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "kubernetes", "cluster": {"server": os.environ["K8S_DOUBLES_API"]}}],
        "users": [{"name": user, "user": {"token": f"double-{user}-{secrets.token_hex(8)}"}}],
        "contexts": [{"name": user, "context": {"cluster": "kubernetes", "user": user}}]})


def documents(path: str) -> dict[str, dict[str, Any]]:
    """A kubeadm config file's documents by kind."""
    found = local(path)
    if not found.exists():
        raise Failure(f"unable to read config from {path!r} : open {path}: no such file or directory")
    return {d["kind"]: d for d in yaml.safe_load_all(found.read_text()) if d}


def own_address() -> str:
    """kubeadm's default advertise address: the node's address on its default route's side
    (here: its first global IPv4 address)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                           capture_output=True, text=True, check=False).stdout
    found = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", shown)
    if not found:
        raise Failure("unable to select an IP from default routes.")
    return found[0]


def require_control_plane() -> None:
    if not local("/etc/kubernetes/admin.conf").exists():
        raise Failure("failed to load admin kubeconfig: open /etc/kubernetes/admin.conf: "
                      "no such file or directory")


def with_port(endpoint: str) -> str:
    """host[:port] with kubeadm's default port when it names none."""
    return endpoint if re.search(r":\d+$", endpoint) else f"{endpoint}:6443"


# -- preflight -----------------------------------------------------------------------------------

def check_name(kind: str, path: str) -> str:
    return f"{kind}--{path.strip('/').replace('/', '-')}"


def port_in_use(port: int) -> bool:
    """kubeadm's PortOpenCheck: can it listen on :port in this network namespace?"""
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("0.0.0.0", port))
    except OSError:
        return True
    finally:
        probe.close()
    return False


def leftovers(run: Run) -> list[tuple[str, str]]:
    """(check name, message) of every failed check: checks.go's RunInitNodeChecks (a control
    plane, also on a control-plane join) and RunJoinNodeChecks."""
    failed: list[tuple[str, str]] = []

    def file_available(path: str) -> None:
        if local(path).exists():
            failed.append((check_name("FileAvailable", path), f"{path} already exists"))

    def port(number: int) -> None:
        if port_in_use(number):
            failed.append((f"Port-{number}", f"Port {number} is in use"))

    if run.control_plane:
        for number in (6443, 10259, 10257):
            port(number)
        for pod in [*CONTROL_PLANE, "etcd"]:
            file_available(f"/etc/kubernetes/manifests/{pod}.yaml")
    if run.workflow == "join":
        for path in ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf",
                     "/etc/kubernetes/pki/ca.crt"):
            file_available(path)
    port(10250)
    if run.control_plane:
        port(2379)
        port(2380)
        data_dir = local(etcd.DATA_DIR)
        if data_dir.is_dir() and any(data_dir.iterdir()):
            failed.append((check_name("DirAvailable", etcd.DATA_DIR), f"{etcd.DATA_DIR} is not empty"))
    return failed


def preflight(run: Run) -> None:
    print("[preflight] Running pre-flight checks")
    ignored = {i.strip().lower() for i in run.flags.get("--ignore-preflight-errors", "").split(",")}
    ignored |= {str(i).lower() for i in run.registration.get("ignorePreflightErrors") or []}
    errors = []
    for name, message in leftovers(run):
        if name.lower() in ignored or "all" in ignored:
            print(f"\t[WARNING {name}]: {message}", file=sys.stderr)
        else:
            errors.append(f"\t[ERROR {name}]: {message}")
    if errors:
        raise Failure("error execution phase preflight: [preflight] Some fatal errors occurred:\n"
                      + "\n".join(errors) + "\n[preflight] If you know what you are doing, you can "
                      "make a check non-fatal with `--ignore-preflight-errors=...`")
    if run.workflow == "join":
        discover(run)


def discover(run: Run) -> None:
    """The join's discovery: cluster-info (from init's bootstrap-token phase), signed for the
    token (valid, not deleted, not expired), its CA pinned; a control plane also needs
    kubeadm-config."""
    discovery = run.docs["JoinConfiguration"]["discovery"]["bootstrapToken"]
    token, token_id = discovery["token"], discovery["token"].split(".")[0]
    with state() as data:
        info = data.get("cluster_info")
        if info is None:
            raise Failure("error execution phase preflight: couldn't validate the identity of the "
                          "API Server: configmaps \"cluster-info\" is forbidden: User "
                          "\"system:anonymous\" cannot get resource \"configmaps\" in API group "
                          "\"\" in the namespace \"kube-public\"")
        if with_port(discovery["apiServerEndpoint"]) != with_port(info["endpoint"]):
            raise Failure(f"error execution phase preflight: Get \"https://"
                          f"{discovery['apiServerEndpoint']}/api/v1/namespaces/kube-public/"
                          "configmaps/cluster-info\": connection refused")
        if not valid_token(data, token):
            raise Failure("error execution phase preflight: couldn't validate the identity of the "
                          "API Server: could not find a JWS signature in the cluster-info "
                          f"ConfigMap for token ID \"{token_id}\"")
        pinned = pki.ca_hash(info["ca"])
        if pinned not in discovery.get("caCertHashes", []):
            raise Failure(f"error execution phase preflight: cluster CA found in cluster-info "
                          f"ConfigMap is invalid: none of the public keys \"{pinned}\" are pinned")
        if run.control_plane and "cluster" not in data:
            raise Failure("error execution phase preflight: unable to fetch the kubeadm-config "
                          "ConfigMap: configmaps \"kubeadm-config\" not found")
    run.details["token"] = token


def valid_token(data: dict[str, Any], token: str) -> bool:
    """A token the bootstrap signer signed cluster-info for: known, not deleted, not expired
    (the token cleaner deletes expired ones)."""
    found = data.get("tokens", {}).get(token)
    return found is not None and not found["deleted"] and (
        found["expires"] is None or now(data) < found["expires"])


# -- init's phases -------------------------------------------------------------------------------

def certs(run: Run) -> None:
    """Cluster CAs (reused when the node has them, as kubeadm does; else new: a new cluster)
    and this node's certificates."""
    with state() as data:
        for name, (key, common) in CLUSTER_CAS.items():
            crt, k = local(f"/etc/kubernetes/pki/{name}.crt"), local(f"/etc/kubernetes/pki/{name}.key")
            if crt.exists() and k.exists():
                data[key] = {"cert": crt.read_text(), "key": k.read_text()}
            else:
                data.pop(key, None)
            write_pair(name, pki.ca(data, key, common))
        if not local("/etc/kubernetes/pki/sa.key").exists():
            data.pop("sa", None)
        sa = pki.ca(data, "sa", "service-accounts")
        cas = {key: data[key] for key, _ in CLUSTER_CAS.values()}
    write("/etc/kubernetes/pki/sa.key", sa["key"], 0o600)
    write("/etc/kubernetes/pki/sa.pub", pki.public_key_pem(sa))
    node_certs(run, cas)


def node_certs(run: Run, cas: dict[str, pki.Pair]) -> None:
    names = [run.node, "localhost", run.ip, "127.0.0.1", "::1"]
    write_pair("apiserver", pki.leaf(cas["ca"], "kube-apiserver", [
        run.node, "kubernetes", "kubernetes.default", "kubernetes.default.svc", run.ip,
        "10.96.0.1"], server=True, client=False))
    write_pair("apiserver-kubelet-client", pki.leaf(cas["ca"], "kube-apiserver-kubelet-client",
                                                    [], server=False, client=True))
    write_pair("front-proxy-client", pki.leaf(cas["front_proxy_ca"], "front-proxy-client", [],
                                              server=False, client=True))
    write_pair("etcd/server", pki.leaf(cas["etcd_ca"], run.node, names, server=True, client=True))
    write_pair("etcd/peer", pki.leaf(cas["etcd_ca"], run.node, names, server=True, client=True))
    write_pair("etcd/healthcheck-client", pki.leaf(cas["etcd_ca"], "kube-etcd-healthcheck-client",
                                                   [], server=False, client=True))
    write_pair("apiserver-etcd-client", pki.leaf(cas["etcd_ca"], "kube-apiserver-etcd-client", [],
                                                 server=False, client=True))


def kubeconfigs(names: list[str]) -> None:
    for name in names:
        write(f"/etc/kubernetes/{name}", kubeconfig(name.removesuffix(".conf")), 0o600)


def static_pods(run: Run) -> None:
    for pod in CONTROL_PLANE:
        write(f"/etc/kubernetes/manifests/{pod}.yaml", yaml.safe_dump(kubelet.manifest(
            pod, [pod, f"--advertise-address={run.ip}"] if pod == "kube-apiserver" else [pod])))


def etcd_manifest(run: Run, initial: str | None = None) -> None:
    write("/etc/kubernetes/manifests/etcd.yaml", yaml.safe_dump(kubelet.manifest(
        "etcd", etcd.command(run.node, run.ip, initial))))
    with state() as data:  # the etcd pod's annotation: where kubeadm finds the cluster's members
        data.setdefault("etcd", {})[run.node] = etcd.client_url(run.ip)


def kubelet_start(run: Run) -> None:
    write("/var/lib/kubelet/kubeadm-flags.env",
          'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"\n')
    write(kubelet.KUBELET_CONFIG, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: "
          "KubeletConfiguration\ncgroupDriver: systemd\n")
    with state() as data:  # the kubelet's flags (kubeadm-flags.env): what it registers with
        data.setdefault("registrations", {})[run.node] = run.registration
    print("[kubelet-start] Starting the kubelet")
    if not kubelet.start_kubelet():
        raise Failure("error execution phase kubelet-start: the kubelet did not start: "
                      "failed to listen on 0.0.0.0:10250: address already in use")


def wait_control_plane(run: Run) -> None:
    if run.control_plane and not etcd.wait_healthy(Path.cwd(), etcd.client_url("127.0.0.1"), 60):
        raise Failure("error execution phase wait-control-plane: could not check the control "
                      "plane: etcd did not become healthy: context deadline exceeded")
    time.sleep(SLEEP_SECONDS)
    if run.workflow == "init":  # the kubelet's registration, with the flags kubelet-start wrote
        with state() as data:  # (`kubeadm init phase wait-control-plane` takes no --config)
            registration = data.get("registrations", {}).get(run.node, run.registration)
        run.details.update(register_node(registration, run.node))


def upload_config(run: Run) -> None:
    cluster = run.docs.get("ClusterConfiguration", {})
    with state() as data:
        data["cluster"] = {"version": str(cluster.get("kubernetesVersion", "")).lstrip("v"),
                           "endpoint": cluster.get("controlPlaneEndpoint") or f"{run.ip}:6443",
                           "podSubnet": cluster.get("networking", {}).get("podSubnet")}
        run.details["cluster"] = data["cluster"]


def upload_certs(run: Run) -> None:
    if "--upload-certs" not in run.flags:
        print("[upload-certs] Skipping phase. Please see --upload-certs")
        return
    require_control_plane()
    key = run.flags.get("--certificate-key") or secrets.token_hex(32)
    with state() as data:
        data["certkey"] = {"key": key, "expires": now(data) + CERT_KEY_SECONDS}
    print(f"[upload-certs] Storing the certificates in Secret \"kubeadm-certs\" in the "
          f"\"kube-system\" Namespace\n[upload-certs] Using certificate key:\n{key}")
    run.details["certificateKey"] = key


def bootstrap_token(run: Run) -> None:
    """cluster-info (the endpoint and the CA) and the InitConfiguration's tokens (one of 24h by
    default); the bootstrap signer signs cluster-info for each."""
    init = run.docs.get("InitConfiguration", {})
    wanted = init.get("bootstrapTokens") or [{}]
    ca = local("/etc/kubernetes/pki/ca.crt")
    if not ca.exists():
        raise Failure("error execution phase bootstrap-token: failure loading ca certificate: "
                      "open /etc/kubernetes/pki/ca.crt: no such file or directory")
    endpoint = run.docs.get("ClusterConfiguration", {}).get("controlPlaneEndpoint")
    with state() as data:  # admin.conf's server: the endpoint, with the API server's port
        data["cluster_info"] = {"endpoint": with_port(endpoint or run.ip), "ca": ca.read_text()}
        for entry in wanted:
            token = str(entry.get("token") or new_token())
            ttl = duration(str(entry.get("ttl", "24h")))
            data.setdefault("tokens", {})[token] = {
                "expires": now(data) + ttl if ttl else None, "ttl": ttl, "deleted": False,
                "description": str(entry.get("description", ""))}
            run.details.setdefault("tokens", []).append(token)
    print("[bootstrap-token] Configured RBAC rules to allow Node Bootstrap tokens to post CSRs")


def kubelet_finalize(run: Run) -> None:
    write("/var/lib/kubelet/pki/kubelet-client-current.pem", "double: the kubelet's client pair\n")


def addon(run: Run) -> None:
    with state() as data:
        data["addons"] = ["coredns", "kube-proxy"]
    print("[addons] Applied essential addon: CoreDNS\n[addons] Applied essential addon: kube-proxy")


def show_join_command(run: Run) -> None:
    print("Your Kubernetes control-plane has initialized successfully!")


# -- join's phases -------------------------------------------------------------------------------

def control_plane_prepare(run: Run) -> None:
    """download-certs (the uploaded certificates: the key must be the uploaded one, and not
    expired: kubeadm deletes the Secret after two hours), certs, kubeconfig, control-plane."""
    if not run.control_plane:
        return
    key = run.docs["JoinConfiguration"]["controlPlane"].get("certificateKey")
    with state() as data:
        uploaded = data.get("certkey")
        if not uploaded or now(data) >= uploaded["expires"]:
            raise Failure("error execution phase control-plane-prepare/download-certs: error "
                          "downloading certs: error downloading the secret: Secret "
                          "\"kubeadm-certs\" was not found in the \"kube-system\" Namespace. This "
                          "Secret might have expired. Please, run `kubeadm init phase upload-certs "
                          "--upload-certs` on a control plane to generate a new one")
        if uploaded["key"] != key:
            raise Failure("error execution phase control-plane-prepare/download-certs: error "
                          "downloading certs: error decoding secret data with provided key: "
                          "cipher: message authentication failed")
        cas = {k: data[k] for k, _ in CLUSTER_CAS.values()}
        sa = data["sa"]
    for name, (k, _) in CLUSTER_CAS.items():
        write_pair(name, cas[k])
    write("/etc/kubernetes/pki/sa.key", sa["key"], 0o600)
    write("/etc/kubernetes/pki/sa.pub", pki.public_key_pem(sa))
    node_certs(run, cas)
    kubeconfigs(["admin.conf", "controller-manager.conf", "scheduler.conf"])
    static_pods(run)
    run.details["certificateKey"] = key


def join_kubelet_start(run: Run) -> None:
    """The CA from cluster-info, the bootstrap kubeconfig, the kubelet started; its TLS
    bootstrap writes kubelet.conf and removes bootstrap-kubelet.conf."""
    node = node_of(run.node)
    if node is not None and ready(node):
        raise Failure("error execution phase kubelet-start: a Node with name "
                      f"\"{run.node}\" and status \"Ready\" already exists in the cluster. You "
                      "must delete the existing Node or change the name of this new joining Node")
    with state() as data:
        info = data.get("cluster_info")
    if info is None:
        raise Failure("error execution phase kubelet-start: couldn't get the cluster-info "
                      "ConfigMap: configmaps \"cluster-info\" is forbidden")
    ca = info["ca"]
    if not run.control_plane:
        write("/etc/kubernetes/pki/ca.crt", ca)
    write("/etc/kubernetes/bootstrap-kubelet.conf", kubeconfig("tls-bootstrap"), 0o600)
    kubelet_start(run)
    time.sleep(SLEEP_SECONDS / 2)
    kubeconfigs(["kubelet.conf"])
    write("/var/lib/kubelet/pki/kubelet-client-current.pem", "double: the kubelet's client pair\n")
    local("/etc/kubernetes/bootstrap-kubelet.conf").unlink()
    run.details.update(register_node(run.registration, run.node))


def etcd_join(run: Run) -> None:
    """The member added as a learner through the cluster's members (one already added by an
    earlier attempt is taken, as kubeadm's addMember does), its static pod written (the kubelet
    starts it, initial-cluster-state existing), promoted."""
    if not run.control_plane:
        return
    with state() as data:
        endpoints = [url for name, url in data.get("etcd", {}).items() if name != run.node]
    root = Path.cwd()
    try:
        initial = etcd.add_learner(root, endpoints, run.node, run.ip)
        print("[etcd] Announced new etcd member joining to the existing etcd cluster")
        etcd_manifest(run, initial)
        etcd.promote(root, endpoints, run.ip, timeout=40)
    except RuntimeError as error:
        raise Failure(f"error execution phase etcd-join: {error}") from None
    if not etcd.wait_healthy(root, etcd.client_url(run.ip), 40):
        raise Failure("error execution phase etcd-join: timeout waiting for etcd cluster to be "
                      "available")


def control_plane_join(run: Run) -> None:
    """mark-control-plane."""
    if run.control_plane:
        print("[mark-control-plane] Marking the node as control-plane")


def join_wait(run: Run) -> None:
    time.sleep(SLEEP_SECONDS / 2)
    print("This node has joined the cluster")


INIT: dict[str, Callable[[Run], None]] = {
    "preflight": preflight, "certs": certs, "kubeconfig": lambda r: kubeconfigs(KUBECONFIGS),
    "etcd": etcd_manifest, "control-plane": static_pods, "kubelet-start": kubelet_start,
    "wait-control-plane": wait_control_plane, "upload-config": upload_config,
    "upload-certs": upload_certs, "mark-control-plane": lambda r: None,
    "bootstrap-token": bootstrap_token, "kubelet-finalize": kubelet_finalize, "addon": addon,
    "show-join-command": show_join_command}
JOIN: dict[str, Callable[[Run], None]] = {
    "preflight": preflight, "control-plane-prepare": control_plane_prepare,
    "kubelet-start": join_kubelet_start, "etcd-join": etcd_join,
    "control-plane-join": control_plane_join,
    "wait-control-plane": join_wait}


def workflow(name: str, words: list[str], flags: dict[str, str]) -> Details:
    """`kubeadm init|join [phase NAME [SUB]]`: the phases, in kubeadm's order, each followed by
    its boundary (the tests' pause and kill hooks)."""
    phases, order = (INIT, INIT_PHASES) if name == "init" else (JOIN, JOIN_PHASES)
    if words[1:2] == ["phase"]:
        wanted = words[2].split("/")[0] if len(words) > 2 else ""
        if wanted not in phases:
            raise Failure(f"unknown command \"{wanted}\" for \"kubeadm {name} phase\"")
        chosen = [wanted]
    else:
        skipped = set(filter(None, flags.get("--skip-phases", "").split(",")))
        chosen = [p for p in order if p not in skipped]
    mixed = sorted(f for f in flags if f not in WITH_CONFIG)
    if "--config" in flags and mixed:
        raise Failure(f"can not mix '--config' with arguments {[f.lstrip('-') for f in mixed]}")
    docs = documents(flags["--config"]) if "--config" in flags else {}
    if name == "join" and "JoinConfiguration" not in docs:
        raise Failure("discovery: Invalid value: \"\": bootstrapToken or file must be set "
                      "(the double reads a JoinConfiguration from --config)")
    if name == "init":
        endpoint = docs.get("InitConfiguration", {}).get("localAPIEndpoint") or {}
        control_plane = True
    else:
        plane = docs.get("JoinConfiguration", {}).get("controlPlane")
        endpoint, control_plane = (plane or {}).get("localAPIEndpoint") or {}, plane is not None
    kind = "InitConfiguration" if name == "init" else "JoinConfiguration"
    registration = docs.get(kind, {}).get("nodeRegistration") or {}
    run = Run(name, flags, docs, registration.get("name") or socket.gethostname(),
              endpoint.get("advertiseAddress") or own_address(), control_plane)
    if name == "init" and len(chosen) > 1:
        print(f"[init] Using Kubernetes version: "
              f"{docs.get('ClusterConfiguration', {}).get('kubernetesVersion', '')}")
    for phase in chosen:
        phases[phase](run)
        boundary(name, phase)
    if name == "join":
        plane = docs.get("JoinConfiguration", {}).get("controlPlane")
        run.details.update({"controlPlane": plane is not None,
                            "certificateKey": (plane or {}).get("certificateKey")})
    return {"phases": chosen, **run.details}


# -- the kubelet's part: registering the Node ----------------------------------------------------

def node_of(name: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{os.environ['K8S_DOUBLES_API']}/api/v1/nodes/{name}",
                                    timeout=10) as answer:
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError:
        return None


def ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def register_node(registration: dict[str, Any], name: str) -> Details:
    """POST the Node as its kubelet would: the name, the labels and providerID of its
    kubeletExtraArgs (v1beta4's list of name/value), NotReady until a network plugin runs on
    it (tests/support/k8s_doubles/network.py plays the CNI's part)."""
    extra = registration.get("kubeletExtraArgs") or []
    args = {a["name"]: a["value"] for a in extra} if isinstance(extra, list) else dict(extra)
    labels = dict(pair.split("=", 1) for pair in args.get("node-labels", "").split(",") if pair)
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


# -- tokens, certificate keys --------------------------------------------------------------------

def new_token() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return ("".join(secrets.choice(alphabet) for _ in range(6)) + "."
            + "".join(secrets.choice(alphabet) for _ in range(16)))


def duration(text: str) -> float:
    """A Go duration as kubeadm's --ttl takes it: 900s, 15m, 1h30m, 0 (never expires)."""
    if text == "0":
        return 0.0
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise Failure(f"invalid argument \"{text}\" for \"--ttl\" flag: time: invalid duration")
    return sum(float(n) * units[u] for n, u in parts)


def kubeadm_token(words: list[str], flags: dict[str, str]) -> Details:
    require_control_plane()
    with state() as data:
        tokens = data.setdefault("tokens", {})
        if words[1] == "create":
            token = new_token()
            ttl = duration(flags.get("--ttl", "24h"))
            tokens[token] = {"expires": now(data) + ttl if ttl else None, "ttl": ttl,
                             "deleted": False, "description": flags.get("--description", "")}
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


def certificate_key() -> Details:
    key = secrets.token_hex(32)
    print(key)
    return {"certificateKey": key}


# -- upgrade -------------------------------------------------------------------------------------

def semantic(text: str) -> tuple[int, int, int, str]:
    found = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-(\S+))?", text)
    if not found:
        raise Failure(f"[upgrade/version] FATAL: couldn't parse version \"{text}\"")
    return int(found[1]), int(found[2]), int(found[3]), found[4] or ""


def policy(cluster: str, target: str, kubeadm: str | None) -> tuple[list[str], list[str]]:
    """policy.go's EnforceVersionPolicies: (mandatory errors, errors --force bypasses)."""
    new, current = semantic(target), semantic(cluster)
    mandatory: list[str] = []
    skippable: list[str] = []
    shown = f"v{target.lstrip('v')}"
    too_far = (mandatory if not new[3] else skippable)
    if new[1] > current[1] + 1:
        too_far.append(f"Specified version to upgrade to \"{shown}\" is too high; kubeadm can "
                       "upgrade only 1 minor version at a time")
    if new[1] < current[1] - 1:
        too_far.append(f"Specified version to downgrade to \"{shown}\" is too low; kubeadm can "
                       "downgrade only 1 minor version at a time")
    if kubeadm is not None:
        own = semantic(kubeadm)
        if own[:3] < new[:3]:
            if new[1] > own[1]:
                too_far.append(f"Specified version to upgrade to \"{shown}\" is at least one minor "
                               f"release higher than the kubeadm minor release ({new[1]} > "
                               f"{own[1]}). Such an upgrade is not supported")
            else:
                skippable.append(f"Specified version to upgrade to \"{shown}\" is higher than the "
                                 f"kubeadm version \"v{kubeadm}\". Upgrade kubeadm first using the "
                                 "tool you used to install kubeadm")
        if own[0] > new[0] or own[1] > new[1]:
            skippable.append(f"Kubeadm version v{kubeadm} can only be used to upgrade to Kubernetes "
                             f"version {own[0]}.{own[1]}")
    if new[3]:
        skippable.append(f"Specified version to upgrade to \"{shown}\" is an unstable version and "
                         "such upgrades weren't allowed via setting the --allow-*-upgrades flags")
    return mandatory, skippable


def kubeadm_upgrade(words: list[str], flags: dict[str, str]) -> Details:
    with state() as data:
        cluster = data.get("cluster")
        installed = data.get("installed", {}).get(str(Path.cwd()), {}).get("kubeadm")
    if words[1] == "apply":
        require_control_plane()
        if cluster is None:
            raise Failure("[upgrade/config] FATAL: unable to fetch the kubeadm-config ConfigMap: "
                          "configmaps \"kubeadm-config\" not found")
        if len(words) < 3:
            raise Failure("[upgrade/version] FATAL: missing one or more required arguments: "
                          "version")
        print(f"[upgrade/versions] Cluster version: v{cluster['version']}")
        mandatory, skippable = policy(cluster["version"], words[2], installed)
        if mandatory:
            raise Failure("[upgrade/version] FATAL: the --version argument is invalid due to these "
                          "fatal errors:\n\n" + "\n".join(f"- {e}" for e in mandatory)
                          + "\n\nPlease fix the misalignments highlighted above and try upgrading "
                          "again")
        if skippable and "--force" not in flags and "-f" not in flags:
            raise Failure("[upgrade/version] FATAL: the --version argument is invalid due to these "
                          "errors:\n\n" + "\n".join(f"- {e}" for e in skippable)
                          + "\n\nCan be bypassed if you pass the --force flag")
        if not {"--yes", "-y", "--force", "-f"} & set(flags):
            print("[upgrade] Are you sure you want to proceed? [y/N]: ")
            raise Failure("won't proceed; the user didn't answer (Y|n) in order to continue")
        with state() as data:
            data["cluster"]["version"] = words[2].lstrip("v")
        print(f"[upgrade/successful] SUCCESS! Your cluster was upgraded to \"{words[2]}\".")
        return {"version": words[2].lstrip("v")}
    if words[1] == "node":
        if not local("/etc/kubernetes/kubelet.conf").exists():
            raise Failure("couldn't create a Kubernetes client from file "
                          "\"/etc/kubernetes/kubelet.conf\": no such file or directory")
        if cluster is None:
            raise Failure("unable to fetch the kubeadm-config ConfigMap: configmaps "
                          "\"kubeadm-config\" not found")
        print("[upgrade] The configuration for this node was successfully upgraded!")
        return {"version": cluster["version"]}
    raise Failure(f"unknown command \"{words[1]}\" for \"kubeadm upgrade\"")


# -- reset ---------------------------------------------------------------------------------------

def clean(path: str) -> None:
    """A directory's contents deleted (kubeadm's CleanDir), the directory kept."""
    target = local(path)
    if target.is_dir():
        for child in target.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def kubeadm_reset(words: list[str], flags: dict[str, str]) -> Details:
    if "--force" not in flags and "-f" not in flags:
        print("[reset] Are you sure you want to proceed? [y/N]: ")
        raise Failure("aborted reset operation")
    print("[preflight] Running pre-flight checks")
    details: Details = {}
    manifest = local("/etc/kubernetes/manifests/etcd.yaml")
    if manifest.exists():
        command = yaml.safe_load(manifest.read_text())["spec"]["containers"][0]["command"]
        flag = dict(a.split("=", 1) for a in command if a.startswith("--") and "=" in a)
        peer, name = flag["--initial-advertise-peer-urls"], flag["--name"]
        with state() as data:
            endpoints = list(data.get("etcd", {}).values())
        error = etcd.remove(Path.cwd(), endpoints, peer)
        if error:
            print(f"W{time.strftime('%m%d %H:%M:%S')} removeetcdmember.go:60] [reset] Failed to "
                  f"remove etcd member: {error}, please manually remove this etcd member using "
                  "etcdctl", file=sys.stderr)
        details["etcdMemberRemoved"] = error is None
        with state() as data:
            data.get("etcd", {}).pop(name, None)
    elif not local(etcd.DATA_DIR).exists():
        print("[reset] No etcd config found. Assuming external etcd\n"
              "[reset] Please, manually reset etcd to prevent further issues")
    print("[reset] Stopping the kubelet service")
    kubelet.stop_kubelet()
    kubelet.remove_containers()
    if local(etcd.DATA_DIR).is_dir() and any(local(etcd.DATA_DIR).iterdir()):
        clean(etcd.DATA_DIR)
        print(f"[reset] Deleted contents of the etcd data directory: {etcd.DATA_DIR}")
    dirs = ["/etc/kubernetes/manifests", "/var/lib/kubelet", "/etc/kubernetes/pki"]
    for path in dirs:
        clean(path)
    print(f"[reset] Deleting contents of directories: [{' '.join(dirs)}]")
    files = [f"/etc/kubernetes/{n}" for n in [*KUBECONFIGS, "bootstrap-kubelet.conf"]]
    for path in files:
        local(path).unlink(missing_ok=True)
    print(f"[reset] Deleting files: [{' '.join(files)}]")
    print("\nThe reset process does not clean CNI configuration. To do so, you must remove "
          "/etc/cni/net.d\n\nThe reset process does not reset or clean up iptables rules or IPVS "
          "tables.\nIf you wish to reset iptables, you must do so manually by using the "
          "\"iptables\" command.\n\nIf your cluster was setup to utilize IPVS, run ipvsadm --clear "
          "(or similar)\nto reset your system's IPVS tables.\n\nThe reset process does not clean "
          "your kubeconfig files and you must remove them manually.\nPlease, check the contents "
          "of the $HOME/.kube/config file.")
    return details


def kubeadm(args: list[str]) -> Details:
    words, flags = parse(args)
    handlers: dict[tuple[str, ...], Callable[[list[str], dict[str, str]], Details]] = {
        ("init",): lambda w, f: workflow("init", w, f),
        ("join",): lambda w, f: workflow("join", w, f), ("token",): kubeadm_token,
        ("upgrade",): kubeadm_upgrade, ("reset",): kubeadm_reset,
        ("certs", "certificate-key"): lambda w, f: certificate_key(),
    }
    for prefix, handler in handlers.items():
        if tuple(words[:len(prefix)]) == prefix:
            return handler(words, flags)
    raise Failure(f"unknown command {words!r} for \"kubeadm\"")
