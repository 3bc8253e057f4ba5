"""Kernel settings kubeadm's preflight checks: its release, swap, forwarding, bridge
netfilter, cgroups."""

from __future__ import annotations

import re

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, warned

IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
BRIDGE_NF = "/proc/sys/net/bridge/bridge-nf-call-iptables"
SYSCTL_REMEDY = "persist it in /etc/sysctl.d/99-kubernetes.conf and run `sysctl --system`"


# kubeadm's SystemVerification (k8s.io/system-validators, KernelSpec, from Kubernetes 1.32):
# the release must be 4.19.x or 5 and later; it is an error, not a warning.
_RELEASE = re.compile(r"(\d+)\.(\d+)")
VALIDATED_KERNELS = "4.19, or 5.0 and later"


def evaluate_kernel_version(release: str) -> Outcome:
    found = _RELEASE.match(release)
    if found is None:
        return failed(f"kernel release {release!r} cannot be read", "boot a Linux kernel "
                      f"kubeadm validates: {VALIDATED_KERNELS}", release=release)
    major, minor = int(found.group(1)), int(found.group(2))
    if major >= 5 or (major, minor) == (4, 19):
        return passed(f"kernel {release} is in kubeadm's validated range", release=release)
    return failed(
        f"kernel {release} is outside kubeadm's validated range ({VALIDATED_KERNELS}): its "
        "SystemVerification preflight check refuses it",
        "boot a kernel in that range (RHEL 8's 4.18 is below it: use the 9 family)",
        release=release,
    )


def active_swaps(proc_swaps: str | None) -> list[str]:
    """Devices listed in /proc/swaps below its header line."""
    lines = (proc_swaps or "").splitlines()[1:]
    return [line.split()[0] for line in lines if line.strip()]


def evaluate_swap(proc_swaps: str | None) -> Outcome:
    swaps = active_swaps(proc_swaps)
    if swaps:
        return warned(
            f"swap is enabled on {', '.join(swaps)}",
            "`swapoff -a` and remove swap entries from /etc/fstab (or configure the kubelet's "
            "NodeSwap feature)",
            devices=swaps,
        )
    return passed("swap is off")


def evaluate_ip_forward(value: str | None) -> Outcome:
    if value is None:
        return failed(f"{IP_FORWARD} is missing", "enable IPv4 networking in the kernel")
    if value.strip() != "1":
        return failed(
            f"IPv4 forwarding is off ({IP_FORWARD} = {value.strip()})",
            f"`sysctl -w net.ipv4.ip_forward=1` and {SYSCTL_REMEDY}",
        )
    return passed("IPv4 forwarding is on")


def evaluate_bridge_netfilter(value: str | None) -> Outcome:
    if value is None:
        return failed(
            "br_netfilter is not loaded (no bridge-nf-call-iptables)",
            "`modprobe br_netfilter` and list it in /etc/modules-load.d/k8s.conf",
        )
    if value.strip() != "1":
        return failed(
            f"bridged traffic bypasses iptables ({BRIDGE_NF} = {value.strip()})",
            f"`sysctl -w net.bridge.bridge-nf-call-iptables=1` and {SYSCTL_REMEDY}",
        )
    return passed("br_netfilter is loaded and bridge-nf-call-iptables is 1")


def evaluate_cgroups(has_unified: bool, has_v1: bool) -> Outcome:
    if has_unified:
        return passed("cgroup v2 (unified hierarchy)", version=2)
    if has_v1:
        return warned(
            "cgroup v1: deprecated by Kubernetes and unsupported from 1.35",
            "boot with systemd.unified_cgroup_hierarchy=1 to use cgroup v2",
            version=1,
        )
    return failed("no cgroup filesystem mounted at /sys/fs/cgroup", "mount cgroup2 on /sys/fs/cgroup")


async def run_kernel_version(ctx: CheckContext) -> Outcome:
    return evaluate_kernel_version(ctx.host.kernel_release())


async def run_swap(ctx: CheckContext) -> Outcome:
    return evaluate_swap(ctx.host.read_text("/proc/swaps"))


async def run_ip_forward(ctx: CheckContext) -> Outcome:
    return evaluate_ip_forward(ctx.host.read_text(IP_FORWARD))


async def run_bridge_netfilter(ctx: CheckContext) -> Outcome:
    return evaluate_bridge_netfilter(ctx.host.read_text(BRIDGE_NF))


async def run_cgroups(ctx: CheckContext) -> Outcome:
    return evaluate_cgroups(
        ctx.host.exists("/sys/fs/cgroup/cgroup.controllers"),
        bool(ctx.host.listdir("/sys/fs/cgroup")),
    )
