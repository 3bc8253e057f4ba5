"""The kubeadm profile (examples/kubeadm/cluster.yaml) as `coordinator cluster render` shows it
on a fleet of 3 managers and 50 workers, with the control plane's outputs produced and each
joiner's join material minted: what every machine would run, command by command. And every
command it calls that would change a host has a test double (tests/support/k8s_doubles), so
the end-to-end test can run the profile unmodified without touching the test machine."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

import pytest

from coordinator.domain.fleet import Fleet, hypothetical_fleet
from coordinator.domain.minting import needed
from coordinator.domain.model import ClusterSpec, Machine, MachineState
from coordinator.domain.rendering import render_cluster
from nodeagent.contract import ROLES
from nodeagent.protocol import StateItem
from tests.support.k8s_doubles.calls import doubled
from tests.support.kubeadm_profile import deployed, kubeadm_config, profile_spec, rendered

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
    assert list(deploy) == ["init-config", "init", "cni", "control-plane"], \
        "the CNI is a deploy item, after init"
    cluster = kubeadm_config(deploy["init-config"])["ClusterConfiguration"]
    assert cluster["kubernetesVersion"] == f"v{spec.settings.kubernetes.version}"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    assert deploy["init"]["argv"][-2:] == ["", "192.0.2.1"], "no endpoint set: the address"


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
        assert list(upgrade) == ["upgrade-kubeadm", step, "upgrade-kubelet", "daemon-reload",
                                 "restart-kubelet"]
        assert upgrade["upgrade-kubeadm"]["argv"][-2:] == ["1.33.4", "kubeadm"]
        assert upgrade["upgrade-kubelet"]["argv"][-3:] == ["1.33.4", "kubelet", "kubectl"]
        assert upgrade[step]["argv"] == (["kubeadm", "upgrade", "apply", "--yes", "v1.33.4"]
                                         if machine is fleet[0] else ["kubeadm", "upgrade", "node"])
        assert upgrade["restart-kubelet"]["argv"] == ["systemctl", "restart", "kubelet"]


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
            "head"}
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
