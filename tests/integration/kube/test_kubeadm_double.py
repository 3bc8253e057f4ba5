"""The kubeadm double (tests/support/k8s_doubles) as strict as kubeadm, on nodes that are network
namespaces of a LAN, with Debian's real etcd: init writes each phase's files in kubeadm's order
and a kill between two phases leaves exactly the earlier ones; preflight refuses leftovers with
kubeadm's messages unless told to ignore them; tokens and uploaded certificates expire on the
test's clock, and so do its certificates (renewed by `certs renew` and upgrades); kubeadm's
upgrade policy; a 3-member etcd built by init and two control-plane
joins, a member removed from another manager through crictl, and reset's warning (exit 0) once
quorum is lost. The API server is reached only at an address its certificate names (the
advertise address, controlPlaneEndpoint's host), a kubelet only through the server its
kubelet.conf names, and a service the profile writes a unit for runs as its unit says."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.support.k8s_doubles import control
from tests.support.k8s_doubles.common import state
from tests.support.k8s_doubles.kubeadm import CERTIFICATES, INIT_PHASES, client_certificate
from tests.support.k8s_doubles.kubelet import HEARTBEAT
from tests.support.k8s_doubles.pki import ca_hash, not_after
from tests.support.kubeapi import KubeApiServer
from tests.support.lan import Lan, Node
from tests.support.waiting import wait_until


@dataclass
class Cluster:
    network: Lan
    tmp: Path
    env: dict[str, str]
    api: KubeApiServer

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def root(self, node: Node) -> Path:
        root = self.tmp / node.hostname
        root.mkdir(exist_ok=True)
        return root

    def run(self, node: Node, *argv: str) -> subprocess.CompletedProcess[str]:
        return node.ns.run(list(argv), cwd=self.root(node), env=self.env, timeout=120)

    def init_config(self, node: Node, endpoint: str | None = None, **cluster: str) -> None:
        """init.yaml for node; cluster: more ClusterConfiguration fields."""
        path = self.root(node) / "init.yaml"
        path.write_text(yaml.safe_dump_all([
            {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
             "localAPIEndpoint": {"advertiseAddress": node.ip},
             "nodeRegistration": {"name": node.hostname, "taints": []}},
            {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
             "kubernetesVersion": "v1.33.4",
             "controlPlaneEndpoint": endpoint or f"{node.ip}:6443", **cluster}]))

    def join_config(self, node: Node, endpoint: str, token: str, key: str | None) -> None:
        ca = (self.root(self.network.nodes[0]) / "etc/kubernetes/pki/ca.crt").read_text()
        join = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                "discovery": {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": token,
                                                 "caCertHashes": [ca_hash(ca)]}},
                "nodeRegistration": {"name": node.hostname, "taints": []}}
        if key is not None:
            join["controlPlane"] = {"localAPIEndpoint": {"advertiseAddress": node.ip},
                                    "certificateKey": key}
        (self.root(node) / "join.yaml").write_text(yaml.safe_dump(join))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with control.doubled_lan(["m1", "m2", "m3"], tmp_path) as (network, env, api):
        yield Cluster(network, tmp_path, env, api)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {"init.yaml",
                                                                                 "join.yaml"}


def test_init_writes_each_phase_in_order_and_a_kill_leaves_the_earlier_phases(
        cluster: Cluster) -> None:
    m1 = cluster.network.nodes[0]
    cluster.init_config(m1)
    control.arm(cluster.state, pause=[f"m1:init:{p}" for p in INIT_PHASES])
    with subprocess.Popen(m1.ns.argv(["kubeadm", "init", "--config", "/init.yaml"]),
                          cwd=cluster.root(m1), env=cluster.env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as init:
        seen: dict[str, set[str]] = {}
        for phase in INIT_PHASES:
            control.wait_paused(cluster.state, f"m1:init:{phase}")
            seen[phase] = files(cluster.root(m1)) - set().union(*seen.values())
            control.resume(cluster.state, f"m1:init:{phase}")
        assert init.wait(timeout=60) == 0, init.stdout.read() if init.stdout else ""
    assert seen["preflight"] == set()
    assert seen["certs"] >= {"etc/kubernetes/pki/ca.crt", "etc/kubernetes/pki/etcd/ca.crt",
                             "etc/kubernetes/pki/apiserver-etcd-client.key"}
    assert seen["kubeconfig"] == {f"etc/kubernetes/{n}.conf" for n in (
        "admin", "super-admin", "kubelet", "controller-manager", "scheduler")}
    assert seen["etcd"] == {"etc/kubernetes/manifests/etcd.yaml"}
    assert seen["control-plane"] == {f"etc/kubernetes/manifests/{p}.yaml" for p in (
        "kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    assert "var/lib/kubelet/config.yaml" in seen["kubelet-start"]
    assert not any(f.startswith("var/lib/etcd/") for f in set().union(*(
        seen[p] for p in INIT_PHASES[:INIT_PHASES.index("kubelet-start")])))
    assert any(f.startswith("var/lib/etcd/") for f in  # the kubelet ran the etcd pod
               seen["kubelet-start"] | seen["wait-control-plane"])

    # A join killed right after kubelet-start leaves its files: its retry is refused.
    m2 = cluster.network.nodes[1]
    token = ok(cluster.run(m1, "kubeadm", "token", "create")).strip()
    cluster.join_config(m2, f"{m1.ip}:6443", token, None)
    killed = m2.ns.run(["kubeadm", "join", "--config", "/join.yaml"], cwd=cluster.root(m2),
                       env={**cluster.env, "K8S_DOUBLES_KILL": "m2:join:kubelet-start"})
    assert killed.returncode == -9
    left = files(cluster.root(m2))
    assert {"etc/kubernetes/kubelet.conf", "etc/kubernetes/pki/ca.crt",
            "var/lib/kubelet/config.yaml"} <= left
    retry = cluster.run(m2, "kubeadm", "join", "--config", "/join.yaml")
    assert retry.returncode == 1
    for refused in ("[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: "
                    "/etc/kubernetes/kubelet.conf already exists",
                    "[ERROR FileAvailable--etc-kubernetes-pki-ca.crt]: "
                    "/etc/kubernetes/pki/ca.crt already exists",
                    "[ERROR Port-10250]: Port 10250 is in use"):
        assert refused in retry.stderr
    # An init's retry after it completed: every leftover refused, unless ignored.
    again = cluster.run(m1, "kubeadm", "init", "--config", "/init.yaml")
    assert again.returncode == 1
    for refused in ("Port-6443", "Port-10259", "Port-10257", "Port-10250", "Port-2379",
                    "Port-2380", "FileAvailable--etc-kubernetes-manifests-etcd.yaml",
                    "FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml"):
        assert f"[ERROR {refused}]" in again.stderr
    assert "[ERROR DirAvailable--var-lib-etcd]: /var/lib/etcd is not empty" in again.stderr
    ignored = cluster.run(m1, "kubeadm", "init", "phase", "preflight", "--config", "/init.yaml",
                          "--ignore-preflight-errors=all")
    assert ignored.returncode == 0 and "[WARNING Port-10250]" in ignored.stderr
    # kubeadm reset: the kubelet stopped (the port free again), kubeadm's files gone.
    assert ok(cluster.run(m2, "kubeadm", "reset", "--force"))
    assert not (cluster.root(m2) / "etc/kubernetes/kubelet.conf").exists()
    ok(cluster.run(m2, "kubeadm", "join", "phase", "preflight", "--config", "/join.yaml"))


def test_tokens_and_uploaded_certificates_expire_on_the_clock_and_upgrades_follow_the_policy(
        cluster: Cluster) -> None:
    m1, m2 = cluster.network.nodes[:2]
    cluster.init_config(m1)
    for phase in INIT_PHASES:  # one at a time, as a journal of items would drive them
        ok(cluster.run(m1, "kubeadm", "init", "phase", phase, "--config", "/init.yaml",
                       "--upload-certs", "--certificate-key", "a" * 64))
    # cluster-info as kubectl prints it: its kubeconfig names the endpoint and the CA; any
    # other printer, or another namespace, is refused as kubectl refuses it.
    info = ("kubectl", "get", "configmap", "cluster-info", "-o")
    kubeconfig = yaml.safe_load(ok(cluster.run(m2, *info, "jsonpath={.data.kubeconfig}",
                                               "-n", "kube-public")))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{m1.ip}:6443"
    assert ok(cluster.run(m2, *info, "name", "-n", "kube-public")).strip() == \
        "configmap/cluster-info"
    assert "unable to match a printer" in cluster.run(m2, *info, "yaml", "-n",
                                                      "kube-public").stderr
    assert "not found" in cluster.run(m2, *info, "name").stderr
    token = ok(cluster.run(m1, "kubeadm", "token", "create", "--ttl", "1h")).strip()
    cluster.join_config(m2, f"{m1.ip}:6443", token, "a" * 64)
    preflight = ("kubeadm", "join", "phase", "preflight", "--config", "/join.yaml")
    ok(cluster.run(m2, *preflight))
    control.advance(cluster.state, 7201)  # the token (1 h) and the certificates (2 h) gone
    expired = cluster.run(m2, *preflight)
    assert expired.returncode == 1
    assert f'could not find a JWS signature in the cluster-info ConfigMap for token ID ' \
           f'"{token.split(".")[0]}"' in expired.stderr
    token = ok(cluster.run(m1, "kubeadm", "token", "create")).strip()
    cluster.join_config(m2, f"{m1.ip}:6443", token, "a" * 64)
    prepare = cluster.run(m2, "kubeadm", "join", "phase", "control-plane-prepare", "--config",
                          "/join.yaml")
    assert prepare.returncode == 1 and 'Secret "kubeadm-certs" was not found' in prepare.stderr

    # kubeadm's version policy: one minor at a time, not past kubeadm's own minor.
    def apply(version: str) -> subprocess.CompletedProcess[str]:
        return cluster.run(m1, "kubeadm", "upgrade", "apply", "--yes", version)

    assert "is too high; kubeadm can upgrade only 1 minor version" in apply("v1.35.0").stderr
    assert "is too low; kubeadm can downgrade only 1 minor version" in apply("v1.31.2").stderr
    ok(cluster.run(m1, "apt-get", "install", "-y", "kubeadm=1.33.4-*"))
    assert "at least one minor release higher than the kubeadm minor release" in \
        apply("v1.34.1").stderr
    ok(cluster.run(m1, "apt-get", "install", "-y", "kubeadm=1.34.1-*"))
    assert "Can be bypassed if you pass the --force flag" in apply("v1.34.2").stderr
    assert "won't proceed" in cluster.run(m1, "kubeadm", "upgrade", "apply", "v1.34.1").stderr
    ok(apply("v1.34.1"))
    assert "v1.34.1" in ok(cluster.run(m1, "kubelet", "--version"))
    ok(cluster.run(m1, "apt-get", "install", "-y", "kubelet=1.34.1-*", "kubectl=1.34.1-*"))
    assert control.installed(cluster.state, cluster.root(m1)) == dict.fromkeys(
        ("kubeadm", "kubelet", "kubectl"), "1.34.1")
    # upgrade node follows the cluster's version, whatever kubeadm is installed on the node.
    ok(cluster.run(m1, "kubeadm", "upgrade", "node"))


def test_three_managers_make_one_etcd_a_member_is_removed_from_another_and_reset_warns_without_quorum(
        cluster: Cluster) -> None:
    m1, m2, m3 = cluster.network.nodes
    cluster.init_config(m1)
    ok(cluster.run(m1, "kubeadm", "init", "--config", "/init.yaml", "--upload-certs",
                   "--certificate-key", "b" * 64))
    for node in (m2, m3):
        token = ok(cluster.run(m1, "kubeadm", "token", "create")).strip()
        cluster.join_config(node, f"{m1.ip}:6443", token, "b" * 64)
        ok(cluster.run(node, "kubeadm", "join", "--config", "/join.yaml"))
    members = control.etcd_members(cluster.root(m3), m3.ns.argv([]))
    assert sorted(m["name"] for m in members) == ["m1", "m2", "m3"]
    assert not any(m["isLearner"] for m in members)

    # m3's member removed from m1, as an operator does: etcdctl in m1's etcd container.
    etcdctl = ("--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
               "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
               "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key")
    container = ok(cluster.run(m1, "crictl", "ps", "--name", "etcd", "-q")).strip()
    gone = next(m["id"] for m in members if m["name"] == "m3")
    # etcd refuses a removal while a member joined under 5 s ago ("unhealthy cluster"): retried.
    wait_until(lambda: cluster.run(m1, "crictl", "exec", container, "etcdctl", *etcdctl,
                                   "member", "remove", gone).returncode == 0, 30)
    assert sorted(m["name"] for m in control.etcd_members(
        cluster.root(m2), m2.ns.argv([]))) == ["m1", "m2"]
    refused = cluster.run(m1, "crictl", "exec", container, "sh", "-c", "true")
    assert refused.returncode == 1 and "executable file not found" in refused.stderr

    # m2 down: m1 alone is no majority of two; its reset cannot remove its member, warns, exit 0.
    control.power_off(cluster.state, cluster.root(m2))
    reset = cluster.run(m1, "kubeadm", "reset", "--force")
    assert reset.returncode == 0, reset.stderr
    assert "[reset] Failed to remove etcd member" in reset.stderr
    assert "please manually remove this etcd member using etcdctl" in reset.stderr
    assert "does not reset or clean up iptables rules" in reset.stdout
    assert not any((cluster.root(m1) / "var/lib/etcd").iterdir())


UNIT = """[Service]
ExecStartPre=/usr/sbin/haproxy -c -q -f /etc/haproxy/test.cfg
ExecStart=/usr/sbin/haproxy -Ws -f /etc/haproxy/test.cfg -p /run/test.pid
ExecReload=/bin/kill -USR2 $MAINPID
"""


def proxy_config(backend: str) -> str:
    return ("defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 1m\n"
            "  timeout server 1m\nfrontend api\n  bind 127.0.0.1:6444\n  default_backend api\n"
            f"backend api\n  server one {backend}\n")


def test_the_api_server_is_reached_only_at_a_name_its_certificate_has_and_kubelets_through_their_kubeconfig(
        cluster: Cluster) -> None:
    m1, m2, m3 = cluster.network.nodes
    cluster.init_config(m1, endpoint="127.0.0.1:6444")  # a local proxy's
    ok(cluster.run(m1, "kubeadm", "init", "--config", "/init.yaml"))
    pki = cluster.root(m1) / "etc/kubernetes/pki"
    sans = x509.load_pem_x509_certificate((pki / "apiserver.crt").read_bytes()).extensions \
        .get_extension_for_class(x509.SubjectAlternativeName).value
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address(m1.ip)} <= set(
        sans.get_values_for_type(x509.IPAddress))
    with state(cluster.state) as data:
        assert data["cluster_info"]["endpoint"] == "127.0.0.1:6444"
        assert data["kube_proxy"] == {"server": "https://127.0.0.1:6444"}

    def server(node: Node) -> str:
        config = json.loads((cluster.root(node) / "etc/kubernetes/kubelet.conf").read_text())
        return str(config["clusters"][0]["cluster"]["server"])

    assert server(m1) == f"https://{m1.ip}:6443", "ControlPlaneKubeletLocalMode (v1.33)"

    # Discovery at an address of m1's that the certificate does not name: refused.
    assert m1.ns.run(["ip", "addr", "add", "198.18.0.99/24", "dev", "eth0"]).returncode == 0
    token = ok(cluster.run(m1, "kubeadm", "token", "create")).strip()
    cluster.join_config(m2, "198.18.0.99:6443", token, None)
    refused = cluster.run(m2, "kubeadm", "join", "--config", "/join.yaml")
    assert refused.returncode == 1
    assert "couldn't validate the identity of the API Server" in refused.stderr
    assert "not valid for '198.18.0.99'" in refused.stderr

    # A worker joined at m1's address: its kubelet.conf names cluster-info's endpoint, where
    # nothing answers on m2 until a proxy runs there: no heartbeat before, heartbeats after.
    cluster.join_config(m2, f"{m1.ip}:6443", token, None)
    ok(cluster.run(m2, "kubeadm", "join", "--config", "/join.yaml"))
    assert server(m2) == "https://127.0.0.1:6444"

    def beats(name: str) -> float:
        with cluster.api.locked() as api:
            return float(api.nodes[name]["metadata"].get("annotations", {}).get(HEARTBEAT, 0))

    wait_until(lambda: beats("m1") > 0, 20, "m1's heartbeats through its own API server")
    assert beats("m2") == 0
    root = cluster.root(m2)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/test-proxy.service").write_text(UNIT)
    (root / "etc/haproxy").mkdir()
    (root / "etc/haproxy/test.cfg").write_text("frontend broken\n")
    broken = cluster.run(m2, "systemctl", "start", "test-proxy")
    assert broken.returncode == 1 and "ExecStartPre" in broken.stderr, broken.stderr
    assert "is not active, cannot reload" in cluster.run(m2, "systemctl", "reload",
                                                         "test-proxy").stderr
    (root / "etc/haproxy/test.cfg").write_text(proxy_config(f"{m1.ip}:6443"))
    ok(cluster.run(m2, "systemctl", "start", "test-proxy"))
    wait_until(lambda: beats("m2") > 0, 20, "m2's heartbeats through the proxy")

    # kubeadm's ParseHostPort: a bracketed IPv6 address needs its port.
    cluster.init_config(m3, endpoint="[fd00::10]")
    bad = cluster.run(m3, "kubeadm", "init", "phase", "certs", "all", "--config", "/init.yaml")
    assert bad.returncode == 1
    assert "host '[fd00::10]' must be a valid IP address" in bad.stderr
def test_certificates_expire_on_the_clock_and_renewals_and_upgrades_sign_them_anew(
        cluster: Cluster) -> None:
    """kubeadm's certificates (for the cluster's certificateValidityPeriod, here 30 days; its CAs
    ten years) on the test's clock: check-expiration's table, an expired admin.conf refused by
    the API server (kubectl, kubeadm), `certs renew all` signing every one anew, an upgrade
    renewing its components' and admin.conf's."""
    m1 = cluster.network.nodes[0]
    root = cluster.root(m1)
    cluster.init_config(m1, certificateValidityPeriod="720h0m0s")
    ok(cluster.run(m1, "kubeadm", "init", "--config", "/init.yaml"))

    def expiry(path: str) -> float:
        text = (root / "etc/kubernetes" / path).read_text()
        return not_after(client_certificate(text) if path.endswith(".conf") else text)

    table = ok(cluster.run(m1, "kubeadm", "certs", "check-expiration")).splitlines()
    assert table[3].split() == ["CERTIFICATE", "EXPIRES", "RESIDUAL", "TIME", "CERTIFICATE",
                                "AUTHORITY", "EXTERNALLY", "MANAGED"]
    rows = {line.split()[0]: line.split()[6:] for line in table[4:15]}
    assert sorted(rows) == sorted(CERTIFICATES)
    assert rows["admin.conf"] == ["29d", "ca", "no"] and rows["etcd-peer"][1] == "etcd-ca"
    assert [line.split()[0] for line in table[17:20]] == ["ca", "etcd-ca", "front-proxy-ca"]
    assert all(line.split()[6] == "9y" for line in table[17:20])
    first = expiry("admin.conf")

    control.advance(cluster.state, 31 * 86400)  # every leaf expired, the CAs not
    assert "<invalid>" in ok(cluster.run(m1, "kubeadm", "certs", "check-expiration"))
    refused = cluster.run(m1, "kubeadm", "token", "create")
    assert refused.returncode == 1 and "Unauthorized" in refused.stderr
    kubectl = cluster.run(m1, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "-n",
                          "kube-public", "get", "configmap", "cluster-info")
    assert kubectl.returncode == 1
    assert "error: You must be logged in to the server (Unauthorized)" in kubectl.stderr

    renewed = ok(cluster.run(m1, "kubeadm", "certs", "renew", "all"))
    assert "You must restart the kube-apiserver, kube-controller-manager, kube-scheduler and " \
           "etcd" in renewed
    assert 31 * 86400 <= expiry("admin.conf") - first < 32 * 86400  # 30 days from now again
    assert all(abs(expiry(path) - expiry("admin.conf")) < 60 for path, _ in CERTIFICATES.values())
    assert "<invalid>" not in ok(cluster.run(m1, "kubeadm", "certs", "check-expiration"))
    ok(cluster.run(m1, "kubeadm", "token", "create"))

    # An upgrade renews what its components use and admin.conf; once at the version, a
    # re-applied upgrade (its manifests unchanged) renews admin.conf alone.
    ok(cluster.run(m1, "apt-get", "install", "-y", "kubeadm=1.34.1-*"))
    control.advance(cluster.state, 10 * 86400)
    before = {path: expiry(path) for path, _ in CERTIFICATES.values()}
    ok(cluster.run(m1, "kubeadm", "upgrade", "apply", "--yes", "v1.34.1"))
    after = {path: expiry(path) for path, _ in CERTIFICATES.values()}
    assert {path for path in after if after[path] > before[path]} == {
        "admin.conf", "pki/apiserver.crt", "pki/apiserver-etcd-client.crt",
        "pki/apiserver-kubelet-client.crt", "controller-manager.conf", "pki/etcd/healthcheck-client.crt",
        "pki/etcd/peer.crt", "pki/etcd/server.crt", "pki/front-proxy-client.crt", "scheduler.conf"}
    control.advance(cluster.state, 86400)
    ok(cluster.run(m1, "kubeadm", "upgrade", "node"))
    again = {path: expiry(path) for path, _ in CERTIFICATES.values()}
    assert {path for path in again if again[path] > after[path]} == {"admin.conf"}
