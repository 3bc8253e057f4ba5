"""A container runtime and the host tools the kubelet and kube-proxy shell out to."""

from __future__ import annotations

import re

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


# `containerd --version`: "containerd github.com/containerd/containerd v1.7.24 <commit>", or
# Debian's "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1".
_VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+)")


def containerd_version(output: str) -> str | None:
    """The version `containerd --version` prints; None when it prints none."""
    found = _VERSION.search(output)
    return found.group(1) if found else None


def evaluate_runtime(found: dict[str, str], containerd: str | None = None) -> Outcome:
    """A runtime's socket, and containerd's version when it is installed: the coordinator
    judges it against the cluster's Kubernetes version (its data key `containerd`)."""
    if not found:
        return failed(
            "no container runtime socket found (containerd, cri-o or cri-dockerd)",
            "the cluster's prepare items install one; if they do not, install containerd",
            searched=sorted(RUNTIME_SOCKETS),
        )
    runtimes = ", ".join(f"{name} at {path}" for path, name in found.items())
    version = f" (containerd {containerd})" if containerd else ""
    return passed(f"container runtime found: {runtimes}{version}", sockets=found,
                  **({"containerd": containerd} if containerd else {}))


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
    found = {p: n for p, n in RUNTIME_SOCKETS.items() if ctx.host.is_socket(p)}
    binary = ctx.host.which("containerd", BIN_DIRS)
    version = None
    if binary is not None:
        result = await ctx.host.run([str(ctx.host.path(binary)), "--version"])
        version = containerd_version(result.stdout) if result.returncode == 0 else None
    return evaluate_runtime(found, version)


async def run_binaries(ctx: CheckContext) -> Outcome:
    def missing(names: tuple[str, ...]) -> list[str]:
        return [n for n in names if ctx.host.which(n, BIN_DIRS) is None]

    return evaluate_binaries(missing(REQUIRED_BINARIES), missing(RECOMMENDED_BINARIES))
