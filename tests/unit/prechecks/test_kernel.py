from __future__ import annotations

from nodeagent.prechecks import kernel
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree

SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


async def test_swap_off_when_proc_swaps_has_only_its_header(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.write("/proc/swaps", SWAPS_HEADER)
    outcome = await kernel.run_swap(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "swap is off"


async def test_swap_on_warns_naming_every_device(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write(
        "/proc/swaps",
        SWAPS_HEADER
        + "/swap.img\t\t\t\tfile\t\t2097148\t\t0\t\t-2\n"
        + "/dev/sda2                               partition\t1000444\t\t0\t\t-3\n",
    )
    outcome = await kernel.run_swap(make_ctx())
    assert outcome.status is Status.WARN
    assert outcome.message == "swap is enabled on /swap.img, /dev/sda2"
    assert outcome.remedy.startswith("`swapoff -a` and remove swap entries from /etc/fstab")
    assert outcome.data == {"devices": ["/swap.img", "/dev/sda2"]}


async def test_no_proc_swaps_means_no_swap(make_ctx: MakeContext) -> None:
    assert (await kernel.run_swap(make_ctx())).status is Status.PASS


async def test_ip_forward_on_passes(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write(kernel.IP_FORWARD, "1\n")
    outcome = await kernel.run_ip_forward(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "IPv4 forwarding is on"


async def test_ip_forward_off_fails_with_the_sysctl(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write(kernel.IP_FORWARD, "0\n")
    outcome = await kernel.run_ip_forward(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "IPv4 forwarding is off (/proc/sys/net/ipv4/ip_forward = 0)"
    assert outcome.remedy == (
        "`sysctl -w net.ipv4.ip_forward=1` and persist it in /etc/sysctl.d/99-kubernetes.conf "
        "and run `sysctl --system`"
    )


async def test_ip_forward_missing_fails(make_ctx: MakeContext) -> None:
    outcome = await kernel.run_ip_forward(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "/proc/sys/net/ipv4/ip_forward is missing"


async def test_bridge_netfilter_on_passes(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write(kernel.BRIDGE_NF, "1\n")
    outcome = await kernel.run_bridge_netfilter(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "br_netfilter is loaded and bridge-nf-call-iptables is 1"


async def test_bridge_netfilter_off_fails(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write(kernel.BRIDGE_NF, "0\n")
    outcome = await kernel.run_bridge_netfilter(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "bridged traffic bypasses iptables (/proc/sys/net/bridge/bridge-nf-call-iptables = 0)"
    )
    assert outcome.remedy.startswith("`sysctl -w net.bridge.bridge-nf-call-iptables=1`")


async def test_bridge_netfilter_module_not_loaded(root_tree: RootTree, make_ctx: MakeContext) -> None:
    # Without br_netfilter the kernel has no /proc/sys/net/bridge at all.
    root_tree.write(kernel.IP_FORWARD, "1\n")
    outcome = await kernel.run_bridge_netfilter(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "br_netfilter is not loaded (no bridge-nf-call-iptables)"
    assert outcome.remedy == "`modprobe br_netfilter` and list it in /etc/modules-load.d/k8s.conf"


async def test_cgroup_v2(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    outcome = await kernel.run_cgroups(make_ctx())
    assert outcome.status is Status.PASS
    assert outcome.message == "cgroup v2 (unified hierarchy)"
    assert outcome.data == {"version": 2}


async def test_cgroup_v1_warns(root_tree: RootTree, make_ctx: MakeContext) -> None:
    for controller in ("cpu,cpuacct", "memory", "pids", "systemd"):
        root_tree.mkdir(f"/sys/fs/cgroup/{controller}")
    outcome = await kernel.run_cgroups(make_ctx())
    assert outcome.status is Status.WARN
    assert outcome.message == "cgroup v1: deprecated by Kubernetes and unsupported from 1.35"
    assert outcome.remedy == "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2"
    assert outcome.data == {"version": 1}


async def test_no_cgroup_filesystem_fails(root_tree: RootTree, make_ctx: MakeContext) -> None:
    root_tree.mkdir("/sys/fs/cgroup")
    outcome = await kernel.run_cgroups(make_ctx())
    assert outcome.status is Status.FAIL
    assert outcome.message == "no cgroup filesystem mounted at /sys/fs/cgroup"


def test_the_kernel_must_be_in_kubeadms_validated_range() -> None:
    """kubeadm (Kubernetes 1.32+) validates 4.19.x and 5.0 and later; RHEL 8's 4.18 fails."""
    for release in ("4.19.0-26-amd64", "5.14.0-427.el9.x86_64", "6.8.0-45-generic", "10.0.1"):
        assert kernel.evaluate_kernel_version(release).status is Status.PASS, release
    old = kernel.evaluate_kernel_version("4.18.0-553.el8_10.x86_64")
    assert old.status is Status.FAIL
    assert old.message == ("kernel 4.18.0-553.el8_10.x86_64 is outside kubeadm's validated "
                           "range (4.19, or 5.0 and later): its SystemVerification preflight "
                           "check refuses it")
    assert kernel.evaluate_kernel_version("4.20.1").status is Status.FAIL
    assert kernel.evaluate_kernel_version("garbage").status is Status.FAIL
