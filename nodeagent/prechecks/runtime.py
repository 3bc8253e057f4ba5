"""A container runtime and the host tools the kubelet and kube-proxy shell out to."""

from __future__ import annotations

from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, warned

RUNTIME_SOCKETS = {
    "/run/containerd/containerd.sock": "containerd",
    "/var/run/crio/crio.sock": "cri-o",
    "/run/crio/crio.sock": "cri-o",
    "/var/run/cri-dockerd.sock": "cri-dockerd",
}
BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# kubeadm errors on these missing, and only warns on the others.
REQUIRED_BINARIES = ("ip", "iptables", "mount", "nsenter")
RECOMMENDED_BINARIES = ("conntrack", "socat", "ethtool", "ebtables", "tc", "touch")


def evaluate_runtime(found: dict[str, str]) -> Outcome:
    if not found:
        return warned(
            "no container runtime socket found (containerd, cri-o or cri-dockerd)",
            "the cluster's prepare items install one; if they do not, install containerd",
            searched=sorted(RUNTIME_SOCKETS),
        )
    runtimes = ", ".join(f"{name} at {path}" for path, name in found.items())
    return passed(f"container runtime found: {runtimes}", sockets=found)


def evaluate_binaries(missing_required: list[str], missing_recommended: list[str]) -> Outcome:
    data = {"missing_required": missing_required, "missing_recommended": missing_recommended}
    if missing_required:
        return failed(
            f"required binaries not found: {', '.join(missing_required)}",
            "install them (iproute2, iptables, mount, util-linux on Debian/Ubuntu)",
            **data,
        )
    if missing_recommended:
        return warned(
            f"recommended binaries not found: {', '.join(missing_recommended)}",
            "install them (conntrack, socat, ethtool, ebtables, iproute2 on Debian/Ubuntu)",
            **data,
        )
    return passed("all required and recommended binaries found", **data)


async def run_runtime(ctx: CheckContext) -> Outcome:
    return evaluate_runtime({p: n for p, n in RUNTIME_SOCKETS.items() if ctx.host.is_socket(p)})


async def run_binaries(ctx: CheckContext) -> Outcome:
    def missing(names: tuple[str, ...]) -> list[str]:
        return [n for n in names if ctx.host.which(n, BIN_DIRS) is None]

    return evaluate_binaries(missing(REQUIRED_BINARIES), missing(RECOMMENDED_BINARIES))
