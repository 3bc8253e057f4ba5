"""The kubeadm profile's cleanup item, run as a machine's agent runs it (in a temp node root, the
test doubles first in PATH: none of them for iptables, ip or nft, which are the real ones), in a
network namespace the test made into a host with its own firewall and interfaces (SSH open, a
ufw-like chain, a DROP policy, a NAT rule, rules in both iptables backends and in an nftables
table of its own) and then gave what Kubernetes and its CNI leave behind: kube-proxy's,
the kubelet's, calico's, cilium's and the CNI plugins' chains and the rules that jump to them,
calico's own rules in the built-in chains, the nftables tables of kube-proxy and calico, their
interfaces and directories. Afterwards the host is as it was before Kubernetes, and a second
run (the agent retries an item) changes nothing."""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.domain.views.fleet import Fleet, hypothetical_fleet
from tests.support.k8s_doubles.calls import agent_env, calls
from tests.support.kubeadm_profile import profile_spec, rendered, run_exec_item
from tests.support.netns import Namespace, namespace
from tests.support.requirements import require_binary

SAVES = ["iptables-save", "ip6tables-save", "iptables-legacy-save"]
HOST = [  # the host's own firewall and interfaces, each a command
    "iptables -P INPUT DROP",
    "iptables -A INPUT -i lo -j ACCEPT",
    "iptables -A INPUT -p tcp --dport 22 -j ACCEPT",
    "iptables -N ufw-user-input",
    "iptables -A INPUT -j ufw-user-input",
    "iptables -A ufw-user-input -p tcp --dport 443 -m comment --comment kube-api-lb -j ACCEPT",
    "iptables -t nat -A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE",
    "iptables -A INPUT -p tcp --dport 179 -m comment --comment 'calico bgp' -j ACCEPT",
    "ip6tables -P INPUT DROP",
    "ip6tables -A INPUT -p tcp --dport 22 -j ACCEPT",
    "iptables-legacy -N host-legacy",
    "iptables-legacy -A FORWARD -j host-legacy",
    "nft add table inet hostfw",
    "nft 'add chain inet hostfw input { type filter hook input priority 10 ; }'",
    "nft add rule inet hostfw input tcp dport 22 accept",
    "ip link add br0 type bridge",
    "ip link add lxcbr0 type bridge",
    "ip link add veth-host type veth peer name veth-guest",
    "ip link add vxlan100 type vxlan id 100 dstport 4789",
]
KUBERNETES = [  # what kube-proxy, the kubelet and the CNIs leave, as they make it
    "iptables -N KUBE-FIREWALL",
    "iptables -A INPUT -j KUBE-FIREWALL",
    "iptables -A OUTPUT -j KUBE-FIREWALL",
    "iptables -A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP",
    "iptables -N KUBE-FORWARD",
    "iptables -A FORWARD -m comment --comment 'kubernetes forwarding rules' -j KUBE-FORWARD",
    "iptables -t nat -N KUBE-SERVICES",
    "iptables -t nat -N KUBE-SVC-NPX46M4PTMTKRN6Y",
    "iptables -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y",
    "iptables -t nat -A PREROUTING -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    "iptables -t nat -A OUTPUT -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    "iptables -t mangle -N KUBE-IPTABLES-HINT",
    "iptables -N cali-INPUT",
    "iptables -N cali-wl-to-host",
    "iptables -A cali-INPUT -i cali+ -g cali-wl-to-host",
    "iptables -I INPUT 1 -m comment --comment cali:Cz_u1IQiXIMmKD4c -j cali-INPUT",
    "iptables -A FORWARD -m comment --comment cali:S93hcgKJrXEqnTfs -m comment --comment"
    " 'Policy explicitly accepted packet.' -m mark --mark 0x10000/0x10000 -j ACCEPT",
    "iptables -N CILIUM_INPUT",
    "iptables -A INPUT -m comment --comment 'cilium-feeder: CILIUM_INPUT' -j CILIUM_INPUT",
    "ip6tables -N KUBE-FORWARD",
    "ip6tables -A FORWARD -j KUBE-FORWARD",
    "iptables-legacy -t nat -N CNI-HOSTPORT-DNAT",
    "iptables-legacy -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "nft add table ip kube-proxy",
    "nft add table ip6 calico",
    "ip link add cni0 type bridge",
    "ip link add flannel.1 type vxlan id 1 dstport 8472",
    "ip link add vxlan.calico type vxlan id 4096 dstport 4790",
    "ip link add cali123 type veth peer name pod123",
    "ip link add cilium_host type veth peer name cilium_net",
]


def run_all(ns: Namespace, commands: list[str]) -> None:
    for command in commands:
        done = ns.run(["sh", "-c", command])
        assert done.returncode == 0, f"{command}: {done.stderr}"


def add_ipvs_device(ns: Namespace) -> None:
    """kube-proxy's kube-ipvs0: a dummy, or an ifb on a kernel without the dummy module."""
    if ns.run(["ip", "link", "add", "kube-ipvs0", "type", "dummy"]).returncode:
        run_all(ns, ["ip link add kube-ipvs0 type ifb"])


def host_state(ns: Namespace) -> dict[str, object]:
    """What the host's firewall and interfaces are, per iptables backend and family: each
    table's chains with their policies and its rules in order (an empty table, or a built-in
    chain at its default ACCEPT, counts as none), its nftables tables and their rules, its
    interfaces."""
    state: dict[str, object] = {}
    for save in SAVES:
        tables: dict[str, list[str]] = {}
        for line in ns.run([require_binary(save)]).stdout.splitlines():
            if line.startswith("*"):
                table = tables.setdefault(line, [])
            elif line.startswith("-A") or (line.startswith(":") and " ACCEPT " not in line):
                table.append(line)
        state[save] = {name: lines for name, lines in tables.items() if lines}
    state["nft"] = ns.run(["nft", "list", "table", "inet", "hostfw"]).stdout
    state["nft tables"] = sorted(t for t in ns.run(["nft", "list", "tables"]).stdout.splitlines()
                                 if not re.fullmatch(r"table ip6? (filter|nat|mangle|raw)", t))
    state["links"] = sorted(re.findall(r"^\d+: ([^:@]+)", ns.run(["ip", "-o", "link"]).stdout, re.M))
    return state


def test_cleanup_removes_what_kubernetes_and_the_cni_made_and_keeps_the_hosts_own(
        tmp_path: Path) -> None:
    for tool in ("iptables", "ip6tables", "iptables-legacy", "nft"):
        require_binary(tool)
    spec = profile_spec()
    machines = hypothetical_fleet(spec, Fleet(1, 1))
    root = tmp_path / "root"
    made = ["etc/cni/net.d/10-calico.conflist", "var/lib/cni/networks/k8s-pod-network/10.244.0.5",
            "var/lib/calico/nodename", "var/run/calico/cgroup"]
    for path in [*made, "etc/containerd/config.toml", "etc/ssh/sshd_config"]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x\n")
    env = agent_env(tmp_path / "log", tmp_path / "state", "http://127.0.0.1:9")
    with namespace() as ns:
        run_all(ns, HOST)
        host = host_state(ns)
        run_all(ns, KUBERNETES)
        add_ipvs_device(ns)
        assert host_state(ns) != host
        for machine in machines:  # a manager, then a worker: the second finds nothing to do
            cleanup = rendered(spec, machine, machines, "reset")["cleanup"]
            done = run_exec_item({**cleanup, "argv": ns.argv(cleanup["argv"])}, root, env)
            assert done.returncode == 0, done.stderr
            assert host_state(ns) == host
    assert not [path for path in made if (root / path).exists()]
    assert (root / "etc/containerd/config.toml").exists() and (root / "etc/ssh/sshd_config").exists()
    # kube-ipvs0 was there the first time: kube-proxy's IPVS state cleared, once.
    assert [c.argv for c in calls(tmp_path / "log") if c.command == "ipvsadm"] == [["--clear"]]
