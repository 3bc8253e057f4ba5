"""The precheck suite: every check, in the order the report lists them."""

from __future__ import annotations

from nodeagent.prechecks import (
    coordinator,
    dns_port,
    firewall,
    hostname,
    kernel,
    kubernetes,
    machine_identity,
    ntp,
    os_release,
    resolv,
    resources,
    runtime,
)
from nodeagent.prechecks.base import Check
from nodeagent.wire.protocol import Severity, Stage

HARD, SOFT = Severity.HARD, Severity.SOFT
# Kubernetes prerequisites the cluster's prepare items establish: deferred ("to be set by
# Prepare") before them, checked again after them as the gate into Deploy.
PREPARE = Stage.PREPARE

CHECKS: tuple[Check, ...] = (
    Check("os", HARD, "supported operating system and version", os_release.run),
    Check("dns-port", HARD, "port 53 free on TCP and UDP", dns_port.run),
    Check(
        "coordinator", HARD, "coordinator resolvable, reachable and healthy", coordinator.run,
        timeout=lambda c: 3 * c.coordinator.timeout + 0.5,
    ),
    Check("ntp-reachable", HARD, "every NTP server answers", ntp.run_reachable,
          timeout=lambda c: c.ntp.timeout + 0.5),
    Check("time-skew", HARD, "clock agrees with the NTP servers", ntp.run_skew,
          timeout=lambda c: c.ntp.timeout + 0.5),
    Check("kubernetes-leftovers", HARD, "no previous Kubernetes installation", kubernetes.run),
    Check("hostname", HARD, "RFC 1123 hostname matching /etc/hostname", hostname.run),
    Check("machine-identity", HARD, "product_uuid and MACs, unique in the fleet (judged by "
          "the coordinator)", machine_identity.run),
    Check("firewall", HARD, "firewalld and fapolicyd not active", firewall.run),
    Check("resolv-rotate", HARD, "resolv.conf does not rotate nameservers", resolv.run),
    Check("kernel-version", HARD, "a kernel in kubeadm's validated range",
          kernel.run_kernel_version),
    Check("swap", SOFT, "swap disabled", kernel.run_swap, stage=PREPARE),
    Check("ip-forward", HARD, "IPv4 forwarding enabled", kernel.run_ip_forward, stage=PREPARE),
    Check("bridge-netfilter", HARD, "br_netfilter loaded, bridged traffic through iptables",
          kernel.run_bridge_netfilter, stage=PREPARE),
    Check("cgroups", SOFT, "cgroup v2", kernel.run_cgroups),
    Check("cpu", HARD, "CPU minimum for the role", resources.run_cpu),
    Check("memory", HARD, "memory minimum for the role", resources.run_memory),
    Check("disk-var", HARD, "free disk under /var", resources.run_disk),
    Check("container-runtime", HARD, "a container runtime socket; containerd's version",
          runtime.run_runtime, stage=PREPARE),
    Check("binaries", HARD, "host binaries the kubelet needs", runtime.run_binaries),
)

NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
