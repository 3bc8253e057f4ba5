"""The kubeadm profile (examples/kubeadm/cluster.yaml) as `coordinator cluster render` shows it
on a fleet of 3 managers and 50 workers, with the control plane's outputs produced and each
joiner's join material minted: what every machine would run, command by command. And every
command it calls that would change a host has a test double (tests/support/k8s_doubles), so
the end-to-end test can run the profile unmodified without touching the test machine."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from coordinator.domain.assignments.minting import needed
from coordinator.domain.model import ClusterSpec, Machine, MachineState, phase_items
from coordinator.domain.releases.releases import names, upgrade_run
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.fleet import Fleet, hypothetical_fleet
from coordinator.domain.views.rendering import render_cluster
from nodeagent.wire.contract import ROLES
from nodeagent.wire.protocol import ProxySettings, StateItem
from tests.support.k8s_doubles.calls import doubled
from tests.support.kubeadm_profile import (
    PROFILE,
    deployed,
    kubeadm_config,
    profile_spec,
    rendered,
)

CA_HASH = "sha256:" + "c" * 64


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return profile_spec()


@pytest.fixture(scope="module")
def fleet(spec: ClusterSpec) -> list[Machine]:
    """3 managers and 50 workers: manager-1 ran init (its outputs are there), every other
    machine holds join material minted for it alone."""
    return deployed(hypothetical_fleet(spec, Fleet(3, 50)),
                    {"control-plane.caCertHash": CA_HASH,
                     "control-plane.endpoint": "192.0.2.1:6443"},
                    lambda m: {"outputs.token.token": token_of(m), "outputs.certkey.key": key_of(m)}
                    if m.role == "manager" else {"outputs.token.token": token_of(m)})


def token_of(machine: Machine) -> str:
    return f"{machine.hostname[-6:].replace('-', 'x'):0>6}.{'t' * 16}"


def key_of(machine: Machine) -> str:
    return machine.hostname.encode().hex().ljust(64, "0")


def test_the_profile_passes_validation_and_renders_every_machine(spec: ClusterSpec) -> None:
    rendering = render_cluster(spec, [], Fleet(3, 50))
    assert len(rendering.machines) == 53
    assert not [(m.hostname, i.name, i.problems) for m in rendering.machines
                for p in m.phases for i in p.items if i.problems]


def test_kubeadm_init_runs_on_the_first_manager_only(spec: ClusterSpec, fleet: list[Machine]) -> None:
    inits = [m.hostname for m in fleet
             if "phases.sh init" in str(rendered(spec, m, fleet, "deploy"))]
    assert inits == ["manager-1"]
    deploy = rendered(spec, fleet[0], fleet, "deploy")
    assert list(deploy) == ["apiserver-proxy", "init-config", "init", "cni", "control-plane"], \
        "the local API proxy before init; the CNI a deploy item, after init"
    cluster = kubeadm_config(deploy["init-config"])["ClusterConfiguration"]
    assert cluster["kubernetesVersion"] == f"v{spec.settings.kubernetes.version}"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    assert deploy["init"]["argv"][-1] == "", "no endpoint set: init takes the local proxy's"
    assert deploy["control-plane"]["argv"][-1] == "192.0.2.1", \
        "the coordinator's kubeconfig names this manager's API server"


def test_other_managers_join_the_control_plane_with_their_own_token_and_key(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    for machine in fleet[1:3]:
        deploy = rendered(spec, machine, fleet, "deploy")
        join = kubeadm_config(deploy["join-config"])["JoinConfiguration"]
        assert join["discovery"]["bootstrapToken"] == {
            "apiServerEndpoint": "192.0.2.1:6443", "token": token_of(machine),
            "caCertHashes": [CA_HASH]}
        assert join["controlPlane"] == {"localAPIEndpoint": {"advertiseAddress": machine.ip},
                                        "certificateKey": key_of(machine)}
        assert deploy["join"]["env"] == {"JOIN_TOKEN": token_of(machine),
                                         "JOIN_CERT_KEY": key_of(machine)}
        assert sorted(needed(spec, joining(machine))) == ["certkey", "token"]


def test_workers_join_with_their_own_token_and_never_get_a_certificate_key(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    tokens = []
    for machine in fleet[3:]:
        deploy = rendered(spec, machine, fleet, "deploy")
        join = kubeadm_config(deploy["join-config"])["JoinConfiguration"]
        assert "controlPlane" not in join
        assert join["discovery"]["bootstrapToken"]["token"] == token_of(machine)
        assert deploy["join"]["env"] == {"JOIN_TOKEN": token_of(machine), "JOIN_CERT_KEY": ""}
        assert "certkey" not in str(spec.machine_types.worker)
        assert needed(spec, joining(machine)) == ["token"]
        tokens.append(token_of(machine))
    assert len(set(tokens)) == 50


INIT_PHASES = ["preflight", "certs all", "kubeconfig all", "etcd local", "control-plane all",
               "kubelet-start", "wait-control-plane", "upload-config all",
               "upload-certs --upload-certs", "mark-control-plane", "bootstrap-token",
               "kubelet-finalize all", "addon all"]  # kubeadm init's, in its order (v1.33)
MANAGER_JOIN_PHASES = ["preflight", "control-plane-prepare all", "kubelet-start", "etcd-join",
                       "control-plane-join all"]  # v1.33's, less those that do nothing alone


def phases_run(script: str, what: str) -> list[str]:
    """The phases a deploy script hands phases.sh, in order (its quoted words)."""
    joined = script.replace("\\\n", " ")
    start = joined.index(f"phases.sh {what} ")
    return [w for w in shlex.split(joined[start:].split("\n")[0])[3:] if w != '"$@"']


def test_init_and_join_run_kubeadm_phases_one_at_a_time_in_kubeadms_order(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    """So that a rerun resumes at the phase that died (docs/kubernetes.md, When a step dies);
    the outputs come only after the API server served cluster-info, from the control-plane
    item every manager runs after its init or join."""
    init = rendered(spec, fleet[0], fleet, "deploy")["init"]["argv"][2]
    assert phases_run(init, "init") == INIT_PHASES
    for manager in fleet[:3]:
        deploy = rendered(spec, manager, fleet, "deploy")
        assert list(deploy)[-1] == "control-plane", manager.hostname
        outputs = deploy["control-plane"]["argv"][2]
        assert outputs.index("caCertHash=") > outputs.index("get configmap cluster-info")
    join = rendered(spec, fleet[1], fleet, "deploy")["join"]["argv"][2]
    manager, worker = (shlex.split(line.split("set -- ", 1)[1].replace("\\", ""))
                       for line in join.replace("\\\n", " ").splitlines() if "set -- " in line)
    assert manager == MANAGER_JOIN_PHASES and worker == ["preflight", "kubelet-start"]
    assert "kubeadm join --config" not in join and "kubeadm init --config" not in init
    script = rendered(spec, fleet[0], fleet, "prepare")["phases-script"]
    assert script["path"] == "/usr/local/lib/nodeagent/kubeadm/phases.sh"
    assert 'kubeadm "$what" phase $phase --config "$config"' in script["content"]


def joining(machine: Machine) -> Machine:
    """machine entering Deploy: none of its deploy items applied yet."""
    return replace(machine, state=MachineState.DEPLOY, applied=frozenset())


def test_each_kubelet_is_marked_with_its_machine_and_kubeadm_adds_no_taint(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    for machine in fleet:
        deploy = rendered(spec, machine, fleet, "deploy")
        config = kubeadm_config(deploy["init-config" if machine is fleet[0] else "join-config"])
        registration = next(d["nodeRegistration"] for d in config.values()
                            if "nodeRegistration" in d)
        assert registration["kubeletExtraArgs"] == [
            {"name": "node-labels", "value": f"nodeagent.io/machine-id={machine.id}"},
            {"name": "provider-id", "value": f"nodeagent://k8s/{machine.id}"}]
        assert registration["taints"] == [], "the coordinator owns taints"
        assert registration["name"] == machine.hostname


def test_upgrade_items_in_order_the_control_plane_first_then_the_kubelet(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    for machine in fleet:
        upgrade = rendered(spec, machine, fleet, "upgrade")
        step = "upgrade-control-plane" if machine is fleet[0] else "upgrade-node"
        manager = machine.role == "manager"
        assert list(upgrade) == [*["etcd-snapshot"] * manager, "upgrade-kubeadm", step,
                                 "upgrade-kubelet", "daemon-reload", "restart-containerd",
                                 "restart-kubelet",
                                 *["etcd-snapshot-before-renewal", "certs-renew"] * manager]
        if manager:  # etcd as it was before the control plane changes, kept by the coordinator
            assert upgrade["etcd-snapshot"]["argv"] == [
                "sh", "usr/local/lib/nodeagent/kubeadm/etcd-snapshot.sh", machine.ip]
        assert upgrade["upgrade-kubeadm"]["argv"][-2:] == ["1.33.4", "kubeadm"]
        assert upgrade["upgrade-kubelet"]["argv"][-3:] == ["1.33.4", "kubelet", "kubectl"]
        kubeadm = (["kubeadm", "upgrade", "apply", "--yes", "v1.33.4"] if machine is fleet[0]
                   else ["kubeadm", "upgrade", "node"])
        if machine.role == "worker":
            assert upgrade[step]["argv"] == kubeadm
        else:  # then the coordinator's copy of the renewed admin.conf, to this manager
            argv = upgrade[step]["argv"]
            assert [c[:3] for c in commands(argv[2])] == [
                kubeadm[:3], ["sh", "usr/local/lib/nodeagent/kubeadm/coordinator-kubeconfig.sh", ""]]
            assert argv[3:] == ["sh", *["1.33.4"] * (machine is fleet[0]), machine.ip]
        assert upgrade["restart-kubelet"]["argv"] == ["systemctl", "restart", "kubelet"]
    snapshots = {i.name: i.etcd_snapshot_from for i in spec.machine_types.manager
                 if i.etcd_snapshot_from is not None}
    assert snapshots == dict.fromkeys(
        ["etcd-snapshot", "etcd-snapshot-before-renewal", "etcd-snapshot-before-removal"],
        "/etc/kubernetes/nodeagent/etcd-snapshot.db")
    # before an upgrade of Kubernetes, and before a renewal of the certificates
    assert {i.name: i.version for i in spec.machine_types.manager if i.phase == "upgrade"
            and i.etcd_snapshot_from} == {"etcd-snapshot": spec.settings.kubernetes.version,
                                          "etcd-snapshot-before-renewal": "initial"}
    # and before a manager's removal, by the manager that removes its etcd member
    assert [i.name for i in spec.items("manager", "leave")] == ["etcd-snapshot-before-removal",
                                                                "etcd-member-remove"]


def test_every_machine_is_reset_by_kubeadm_then_cleaned(spec: ClusterSpec,
                                                        fleet: list[Machine]) -> None:
    for machine in fleet:
        reset = rendered(spec, machine, fleet, "reset")
        assert reset["kubeadm-reset"]["argv"] == ["kubeadm", "reset", "--force"]
        assert "etc/cni/net.d" in reset["cleanup"]["argv"][2]


def test_join_material_is_minted_and_revoked_with_kubeadm(spec: ClusterSpec) -> None:
    mint = {i.name: i for i in spec.items("manager", "mint")}
    assert "kubeadm token create --ttl" in mint["token"].action.argv[2]  # type: ignore[union-attr]
    assert "kubeadm init phase upload-certs --upload-certs" in mint["certkey"].action.argv[2]  # type: ignore[union-attr]
    (revoke,) = spec.items("manager", "revoke")
    assert revoke.action.argv == ["kubeadm", "token", "delete", "${outputs.token.token}"]  # type: ignore[union-attr]


# -- no command that changes the host without a double ------------------------------------------

# Commands that only read, or write under the working directory (the agent's root) when given
# relative paths: shell builtins and the tools the profile's scripts use that way.
HARMLESS = {"sh", "set", "if", "then", "else", "elif", "fi", "for", "do", "done", "case", "esac",
            "in", "echo", "printf", "export", "unset", "eval", "exit", ".", "[", "command",
            "grep", "sed", "mkdir", "rm", "openssl", "shift", ":", "continue", "awk",
            "head", "sort", "mv", "umask", "sleep", "while",
            "haproxy"}  # haproxy -c: checks a configuration file
# The real network tools of the cleanup: every test that runs it runs it in a network namespace
# of its own (tests/integration/test_kubeadm_cleanup.py, the agents of tests/e2e), so they
# need no double. `$tool` is iptables or ip6tables, each backend.
NETWORK = {"ip", "nft", "$tool-save", "$tool-restore"}
# What separates commands in a script: their names follow.
SEPARATOR = re.compile(r"\|\||&&|[;|\n]|\$\(|\bthen\b|\bdo\b|\belse\b|\bif\b")


def commands(script: str) -> list[list[str]]:
    """The simple commands of a script, each as its words (quoted strings removed, since the
    profile's scripts quote only data, and variable assignments before a command skipped)."""
    joined = script.replace("\\\n", " ")  # continued lines
    bare = re.sub(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"", "''", joined)
    bare = re.sub(r"(^|\s)#[^\n]*", r"\1", bare)  # comments
    bare = re.sub(r"^\s*[^\s()]+(\|[^\s()]+)+\)", "", bare, flags=re.M)  # `a|b)` in a case
    found = []
    for part in SEPARATOR.split(bare):
        part = re.sub(r"^\s*[^\s()]+\)", "", part)  # a case pattern: `calico)`
        words = [w for w in shlex.split(part.replace(")", " "))
                 if w not in ("!", "{", "}")]
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words.pop(0)
        if words:
            found.append(words)
    return found


def test_the_command_scanner_finds_commands_after_separators_and_in_substitutions() -> None:
    script = 'set -e\nx=$(kubeadm token create --ttl "$1s")\na=1 b=2 apt-get install -y "$p" | gpg\n' \
             'if [ -e x ]; then rm -rf etc/x && iptables -F; fi # systemctl; curl\n' \
             'case "$1" in\n  calico) kubectl apply ;;\n  none|off) echo none ;;\nesac'
    assert [c[0] for c in commands(script)] == ["set", "kubeadm", "apt-get", "gpg", "[", "rm",
                                                "iptables", "fi", "case", "kubectl", "echo",
                                                "esac"]


def every_command(spec: ClusterSpec) -> list[tuple[str, list[str]]]:
    """(item, words) of every command the profile runs: exec argvs, `sh -c` scripts, scripts
    its file items write and exec items run with sh, version commands."""
    scripts = {i.action.path.lstrip("/"): i.action.content or i.action.template or ""  # type: ignore[union-attr]
               for role in ROLES for i in getattr(spec.machine_types, role) if i.action.type == "file"}
    found: list[tuple[str, list[str]]] = []
    items: list[StateItem] = [i for role in ROLES for i in getattr(spec.machine_types, role)]
    for item in items:
        argvs = [item.action.argv] if item.action.type == "exec" else []  # type: ignore[union-attr]
        argvs += [item.version_command] if item.version_command else []
        for argv in argvs:
            if argv[:2] == ["sh", "-c"]:
                found += [(item.name, words) for words in commands(argv[2])]
            else:
                found.append((item.name, argv))
    # A profile's script run with sh (from an argv or from a script): the commands it runs.
    while ran := [(i, w) for i, w in found if w[0] == "sh" and w[1:2] and w[1] in scripts]:
        found = [(i, w) for i, w in found if (i, w) not in ran]
        found += [(item, words) for item, w in ran for words in commands(scripts[w[1]])]
    return found


def test_every_command_that_changes_a_host_has_a_test_double(spec: ClusterSpec) -> None:
    found = every_command(spec)
    assert {"kubeadm", "kubectl", "systemctl", "apt-get", "dnf", "modprobe"} <= {w[0] for _, w in found}
    missing = {(item, words[0]) for item, words in found
               if words[0] not in doubled() | HARMLESS | NETWORK}
    assert not missing, f"commands with no double in tests/support/k8s_doubles: {missing}"
    absolute = [(item, words) for item, words in found if words[0] in HARMLESS
                and any(w.startswith("/") and w != "/dev/null" for w in words[1:])]
    assert not absolute, f"paths outside the agent's root given to real commands: {absolute}"
    assert not [(item, words) for item, words in found if "/" in words[0]], "bare names only"


def test_what_renews_the_control_planes_certificates_reports_the_renewed_admin_conf(
        spec: ClusterSpec) -> None:
    """kubeadm's upgrades renew the certificates, and certs-renew (versioned by
    settings.kubernetes.certificateRenewal) renews them in a maintenance release: each reports
    the renewed admin.conf to the coordinator (its copy, to that manager's API server: the
    control-plane item writes it first); workers renew nothing."""
    reporting = {i.name: i for i in spec.machine_types.manager
                 if i.kubeconfig_from == "/etc/kubernetes/nodeagent/coordinator.conf"}
    assert {n for n, i in reporting.items() if i.phase == "deploy"} == {"control-plane"}
    reporting = {n: i for n, i in reporting.items() if i.phase == "upgrade"}
    assert set(reporting) == {"upgrade-control-plane", "upgrade-node", "certs-renew"}
    assert reporting["certs-renew"].version == spec.settings.kubernetes.certificate_renewal
    assert "certs-renew" not in {i.name for i in spec.machine_types.worker}


# -- proxy and air-gap ----------------------------------------------------------------------------

PROXY_ENV = {"http_proxy": "${proxy.http}", "https_proxy": "${proxy.https}",
             "no_proxy": "${proxy.noProxy}"}


def fetches(words: list[str]) -> bool:
    """Whether a command downloads: curl and wget, the package managers, the cilium and helm
    CLIs (charts), `kubectl apply -f` of a URL (or of a variable that may hold one)."""
    if words[0] in {"curl", "wget", "apt-get", "dnf", "cilium", "helm"}:
        return True
    return words[0] == "kubectl" and any(
        flag == "-f" and ("://" in target or target.startswith("$"))
        for flag, target in pairwise(words))


def test_every_item_that_downloads_gets_the_clusters_proxy(spec: ClusterSpec) -> None:
    """Behind a proxy, an item that fetches without it fails at its first download (the CNI
    and helm-controller did): every such item has the three variables of settings.proxy."""
    items = {i.name: i for role in ROLES for i in getattr(spec.machine_types, role)}
    downloading = {item for item, words in every_command(spec) if fetches(words)}
    assert {"containerd", "kubernetes-packages", "cni", "helm-controller",
            "upgrade-kubeadm", "upgrade-kubelet"} <= downloading
    unproxied = sorted(name for name in downloading
                       if not PROXY_ENV.items() <= (items[name].action.env or {}).items())  # type: ignore[union-attr]
    assert not unproxied, f"items that download without settings.proxy: {unproxied}"


def test_the_fetch_scanner_tells_downloads_from_local_commands() -> None:
    assert fetches(["kubectl", "apply", "-f", "https://x/a.yaml"])
    assert fetches(["kubectl", "apply", "-f", "$base/manifests/ns.yaml"])
    assert not fetches(["kubectl", "apply", "--server-side", "-f", "etc/kubernetes/calico.yaml"])
    assert not fetches(["kubectl", "get", "configmap", "cluster-info"])
    assert fetches(["cilium", "install"]) and fetches(["curl", "-fsSL", "$repo/deb/Release.key"])


def test_a_proxy_set_reaches_the_cni_and_helm_controller_as_rendered() -> None:
    proxied = profile_spec()
    proxied = proxied.model_copy(update={"settings": proxied.settings.model_copy(update={
        "proxy": ProxySettings(http="http://proxy.test:3128", https="http://proxy.test:3128",
                               no_proxy=["10.0.0.0/8", ".svc"])})})
    machines = hypothetical_fleet(proxied, Fleet(1, 1))
    for phase, name in (("deploy", "cni"), ("postdeploy", "helm-controller")):
        env = rendered(proxied, machines[0], machines, phase)[name]["env"]
        assert env["https_proxy"] == "http://proxy.test:3128" and env["no_proxy"] == "10.0.0.0/8,.svc"
        assert env["KUBECONFIG"] == "/etc/kubernetes/admin.conf"


def containerd_config(spec: ClusterSpec) -> dict[str, Any]:
    machines = hypothetical_fleet(spec, Fleet(1, 1))
    texts = {rendered(spec, m, machines, "prepare")["containerd-config"]["template"]
             for m in machines}
    (text,) = texts  # every machine the same
    return tomllib.loads(text)


def test_the_sandbox_image_and_the_control_planes_follow_the_image_repository() -> None:
    """An air-gapped cluster mirrors registry.k8s.io: containerd's sandbox image must come from
    the mirror too, at the pause version kubeadm of that Kubernetes version pulls, or no pod
    starts (the sandbox is pulled before any container)."""
    default = containerd_config(profile_spec())
    assert default["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == \
        "registry.k8s.io/pause:3.10"  # kubeadm 1.33's
    mirrored = profile_spec(image_repository="mirror.example:5000/k8s", version="1.34.1")
    cri = containerd_config(mirrored)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "mirror.example:5000/k8s/pause:3.10.1"  # kubeadm 1.34's
    machines = hypothetical_fleet(mirrored, Fleet(1, 1))
    cluster = kubeadm_config(rendered(mirrored, machines[0], machines, "deploy")["init-config"])
    assert cluster["ClusterConfiguration"]["imageRepository"] == "mirror.example:5000/k8s"


def test_a_kubernetes_version_change_updates_containerd_and_its_configuration_and_restarts_it(
        spec: ClusterSpec) -> None:
    """The pause image changes with kubeadm's minor (3.10 to 3.10.1 at 1.34), and 1.36 runs on
    containerd 2.0 or later only: containerd's package and configuration items are versioned
    by the Kubernetes version, so an upgrade runs them again on every machine (containerd.io
    brought up to date, the file written again), and containerd is restarted before the
    kubelet."""
    for role in ROLES:
        versioned = {i.name: i.version for i in spec.items(role, "prepare")
                     if i.name in ("containerd", "containerd-config")}
        assert versioned == dict.fromkeys(("containerd", "containerd-config"),
                                          spec.settings.kubernetes.version)
    upgrade = [i.name for i in spec.items("worker", "upgrade")]
    assert upgrade.index("restart-containerd") < upgrade.index("restart-kubelet")


def test_calico_is_the_manifest_for_more_than_50_nodes_applied_server_side(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    """calico.yaml is Calico's manifest for 50 nodes or fewer; beyond, every Felix watches the
    API server itself. calico-typha.yaml puts Typha between them. Applied server-side, the
    same command installs and upgrades it (no last-applied annotation to outgrow)."""
    cni = rendered(spec, fleet[0], fleet, "deploy")["cni"]
    script, version = cni["argv"][2], cni["argv"][5]
    assert "/manifests/calico-typha.yaml" in script and "/manifests/calico.yaml" not in script
    assert version.startswith("v3.") and "/calico/$2/manifests" in script
    (apply,) = [w for w in commands(script) if w[:2] == ["kubectl", "apply"]]
    assert apply == ["kubectl", "apply", "--server-side", "--force-conflicts", "-f",
                     "etc/kubernetes/nodeagent/calico.yaml"]


def test_a_cni_version_bump_reaches_a_running_cluster_through_every_manager(
        spec: ClusterSpec) -> None:
    """The versions are the cni item's arguments: a new one changes the item, so the next
    upgrade runs it again on every manager (the first to upgrade upgrades the CNI, the others
    find it there), and still does once the first manager is deleted; workers run none."""
    machines = [replace(m, release=spec.release)  # Ready at the release, every item applied
                for m in hypothetical_fleet(spec, Fleet(3, 2))]
    cni = next(i for i in spec.items("manager", "deploy") if i.name == "cni")
    assert cni.when is None, "not the first manager's alone"
    old = cni.action.argv[-2]  # type: ignore[union-attr]
    text = PROFILE.read_text().replace(f"- {old}   # calico", "- v3.30.2   # calico")
    bumped = load_spec(text.replace('release: "1.33.4"', 'release: "1.33.4-cni"'))
    runs = {m.hostname: names(upgrade_run(bumped, m)) for m in machines[1:]}  # manager-1 gone
    assert {h: run.startswith("deploy/cni") for h, run in runs.items()} == {
        "manager-2": True, "manager-3": True, "worker-1": False, "worker-2": False}
    assert all("deploy/cni" not in runs[h] for h in ("worker-1", "worker-2"))
    assert all(names(upgrade_run(spec, m)) == "" for m in machines)  # unchanged: nothing


# -- the API's endpoint: a local proxy on every node in front of every manager ------------------

def test_every_machine_runs_the_local_api_proxy_before_init_or_join_and_again_for_new_managers(
        spec: ClusterSpec, fleet: list[Machine]) -> None:
    """So that no kubelet, kube-proxy or cluster-info names one manager: the proxy runs before
    init (admin.conf names it) and before join (discovery and TLS bootstrap go through it), in
    front of the deployed managers and, on a manager, itself; every deployed machine runs it
    again, versioned by the manager list, when the managers change."""
    managers = ",".join(m.ip or "" for m in fleet[:3])
    for machine in fleet:
        deploy = rendered(spec, machine, fleet, "deploy")
        assert next(iter(deploy)) == "apiserver-proxy"
        run = deploy["apiserver-proxy"]["argv"]
        assert run == ["sh", "usr/local/lib/nodeagent/kubeadm/apiserver-proxy.sh", "", managers,
                       machine.role, machine.ip]
        assert rendered(spec, machine, fleet, "reconfigure")["apiserver-proxy-managers"][
            "argv"] == run
        assert "apiserver-proxy-remove" in rendered(spec, machine, fleet, "reset")
    fewer = phase_items(spec, "worker", "reconfigure", ("192.0.2.2", "192.0.2.3"))
    assert fewer[0].version != phase_items(spec, "worker", "reconfigure", (managers,))[0].version
    external = profile_spec(control_plane_endpoint="lb.example:6443")
    assert rendered(external, fleet[4], fleet, "deploy")["apiserver-proxy"]["argv"][2] == \
        "lb.example:6443", "a load balancer of one's own: the script runs no proxy"


def test_an_ipv6_fleet_renders_no_address_pasted_before_a_port_without_brackets() -> None:
    """Every machine's items on IPv6 addresses: kubeadm's configuration names bare addresses
    (advertiseAddress), and every host:port or URL is made by a script that brackets them
    (apiserver-proxy.sh's servers, init's endpoint, etcd-member-remove's peer URL): no rendered
    text holds an IPv6 address followed by a port."""
    spec = profile_spec()
    fleet = [replace(m, ip=f"fd00::{i + 1}") for i, m in enumerate(
        hypothetical_fleet(spec, Fleet(3, 2)))]
    fleet = deployed(fleet, {"control-plane.caCertHash": CA_HASH,
                             "control-plane.endpoint": "127.0.0.1:6444"},
                     lambda m: {"outputs.token.token": token_of(m), "outputs.certkey.key": key_of(m)})
    unbracketed = re.compile(r"(?<![\[\w:])fd00::\d+:\d+")
    for machine in fleet:
        for phase in ("prepare", "deploy", "reconfigure", "upgrade", "reset"):
            text = str(rendered(spec, machine, fleet, phase))
            assert not unbracketed.search(text), (machine.hostname, phase)
        deploy = rendered(spec, machine, fleet, "deploy")
        assert deploy["apiserver-proxy"]["argv"][3] == "fd00::1,fd00::2,fd00::3"
        if machine.role == "manager":
            config = kubeadm_config(deploy["init-config" if machine is fleet[0] else "join-config"])
            kind = "InitConfiguration" if machine is fleet[0] else "JoinConfiguration"
            local = config[kind] if machine is fleet[0] else config[kind]["controlPlane"]
            assert local["localAPIEndpoint"]["advertiseAddress"] == machine.ip
