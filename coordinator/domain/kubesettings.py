"""settings.kubernetes: what the coordinator needs to reach the cluster (a kubeconfig), and
the Kubernetes settings a profile's items need (version, control-plane endpoint, subnets,
CNI, image repository, dedicated managers, cluster labels), typed and checked when the spec is
applied, so that a subnet typo is refused by `cluster apply` rather than by kubeadm on the
first manager.
Which of them may change after the first manager deployed is specs.py's rule."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from coordinator.domain.labels import checked
from nodeagent.wire.protocol import SpecModel

_VERSION = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$")
_NUMERIC = re.compile(r"^[0-9.]+$")
# A registry host[:port] and path, as image references spell them (lowercase, no scheme).
_REPOSITORY = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
# The pause image each kubeadm minor pulls and compares the runtime's sandbox image with
# (PauseVersion in kubeadm's cmd/kubeadm/app/constants/constants.go): 3.10 from 1.31, 3.10.1
# from 1.34. A minor past the last row takes its value until a row is added (kubeadm's
# preflight only warns on a different one); one before the first takes the first.
PAUSE_VERSIONS: tuple[tuple[tuple[int, int], str], ...] = (((1, 31), "3.10"), ((1, 34), "3.10.1"))
ENDPOINT_SYNTAX = "host or host:port, e.g. k8s.example:6443, 10.0.0.10 or [fd00::10]:6443"


def endpoint_problem(value: str) -> str | None:
    """What is wrong with value as a control-plane endpoint (None: nothing)."""
    if "://" in value:
        return f"a host[:port], not a URL: write {value.split('://', 1)[1].rstrip('/')}"
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return f"must be {ENDPOINT_SYNTAX}"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} in brackets must be an IPv6 address"
        colon, port = rest[:1], rest[1:]
    else:
        if value.count(":") > 1:
            return f"an IPv6 address goes in brackets: [{value}]"
        host, colon, port = value.partition(":")
        if not _HOSTNAME.match(host) or (_NUMERIC.match(host) and not _ipv4(host)):
            return f"{host!r} is not a host name or IPv4 address; must be {ENDPOINT_SYNTAX}"
    if colon and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port!r} must be a number from 1 to 65535"
    return None


def pause_version(kubernetes: str | None) -> str:
    """The pause image's tag kubeadm of this Kubernetes version uses (None: the latest row)."""
    numbers = re.match(r"(\d+)\.(\d+)", kubernetes or "")
    minor = (int(numbers[1]), int(numbers[2])) if numbers else (999, 0)
    rows = [tag for since, tag in PAUSE_VERSIONS if minor >= since]
    return rows[-1] if rows else PAUSE_VERSIONS[0][1]


def _ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _subnet(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        if "host bits set" in str(exc):
            network = ipaddress.ip_network(value, strict=False)
            raise ValueError(f"{value} has host bits set: did you mean {network}?") from None
        raise ValueError(f"{value!r} is not a CIDR such as 10.244.0.0/16") from None


class KubernetesSettings(SpecModel):
    kubeconfig: str | None = Field(
        default=None, description="path of a kubeconfig file on the coordinator's host")
    version: str | None = Field(
        default=None, description="the Kubernetes version items install, e.g. 1.31.2: "
        "${kubernetes.version}")
    allow_downgrade: bool = Field(
        default=False, description="set by the coordinator, never by the file (a file's value "
        "is replaced): true while the version was applied by `cluster apply --allow-downgrade` "
        "as a forced downgrade, so the package items may install an older version: "
        "${kubernetes.allowDowngrade}")
    control_plane_endpoint: str | None = Field(
        default=None, description="host[:port] the nodes reach the API server at (a load "
        "balancer or virtual IP in front of the managers): ${kubernetes.controlPlaneEndpoint}")
    pod_subnet: str = Field(default="10.244.0.0/16", description="the pods' CIDR")
    service_subnet: str = Field(default="10.96.0.0/12", description="the services' CIDR")
    cni: Literal["calico", "cilium", "none"] = Field(
        default="calico", description="the network plugin items install (none: the profile "
        "installs its own, or none)")
    image_repository: str = Field(
        default="registry.k8s.io", description="where the control plane's and the sandbox's "
        "images come from (a mirror for air-gapped nodes): ${kubernetes.imageRepository}, and "
        "${kubernetes.sandboxImage}, its pause image at kubeadm's version for this Kubernetes")
    dedicated_managers: bool = Field(
        default=False, description="managers run no workloads: the coordinator taints their "
        "Nodes node-role.kubernetes.io/control-plane:NoSchedule")
    labels: dict[str, str] = Field(
        default_factory=dict, description="the cluster's labels: ${cluster.labels} (k=v,...) "
        "and ${cluster.labels.KEY}; the coordinator puts them on every Node")
    certificate_renewal: str = Field(
        default="", max_length=63, description="a name for the last renewal of the control "
        "plane's certificates, e.g. 2026-11: a profile versions its renewal item by it, so a "
        "new release that changes it renews them on every manager: "
        "${kubernetes.certificateRenewal}")
    node_ready_timeout_seconds: float = Field(
        default=600, gt=0, description="once a machine's deploy items are applied, how long its "
        "Node may take to register and report Ready before the status says it fails (the "
        "machine stays in Deploy until it does)")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not _VERSION.match(value):
            raise ValueError(f"{value!r} must be a version such as 1.31.2 (MAJOR.MINOR.PATCH, "
                             "no leading v: items add one where they need it)")
        return value

    @field_validator("control_plane_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = endpoint_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("pod_subnet", "service_subnet")
    @classmethod
    def _cidr(cls, value: str) -> str:
        return _subnet(value)

    @field_validator("image_repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not _REPOSITORY.match(value):
            raise ValueError(f"{value!r} must be a registry and path such as registry.k8s.io or "
                             "mirror.example:5000/k8s (lowercase, no scheme, no trailing /)")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return checked(value)

    @model_validator(mode="after")
    def _apart(self) -> KubernetesSettings:
        pods, services = (ipaddress.ip_network(s) for s in (self.pod_subnet, self.service_subnet))
        if pods.version == services.version and pods.overlaps(services):  # type: ignore[arg-type]
            raise ValueError(f"podSubnet {pods} overlaps serviceSubnet {services}: a pod "
                             "address would be taken for a service's")
        return self


def sandbox_image(settings: KubernetesSettings) -> str:
    """The sandbox (pause) image containerd must run pods with: the one kubeadm pulls from
    the cluster's image repository, which an air-gapped node can reach."""
    return f"{settings.image_repository}/pause:{pause_version(settings.version)}"
