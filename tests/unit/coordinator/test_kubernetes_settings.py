"""settings.kubernetes as a profile needs it: typed values its items name, refused with the
field and why when malformed, and the networking fields fixed once the first manager
deployed (the rule of `cluster apply` and the upgrade dry run, without a store)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.kubesettings import KubernetesSettings, sandbox_image
from coordinator.domain.model import ClusterSpec, MachineState
from coordinator.domain.specs.specs import check_fixed, load_spec
from coordinator.domain.specs.templating import template_values
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import machine


def spec(kubernetes: str = "{}") -> ClusterSpec:
    return load_spec(f"""\
name: lab
release: "1"
settings:
  kubernetes: {kubernetes}
machineTypes:
  manager:
    - {{name: init, phase: deploy, action: {{type: exec, argv: [kubeadm, init]}}}}
""")


def refusal(kubernetes: str) -> str:
    with pytest.raises(InvalidDocument) as refused:
        spec(kubernetes)
    return str(refused.value)


def test_the_settings_reach_every_assignment_as_template_values() -> None:
    values = template_values(spec(
        '{version: 1.31.2, controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.50.0.0/16, '
        'serviceSubnet: 10.60.0.0/16, cni: cilium, dedicatedManagers: true, '
        'certificateRenewal: "2026-11", imageRepository: "mirror.lab:5000/k8s", '
        'labels: {env: prod, tier: gold}}'),
        machine("m1", "manager"), [])
    assert {name: value for name, value in values.items()
            if name.startswith(("kubernetes.", "cluster.labels"))} == {
        "kubernetes.version": "1.31.2", "kubernetes.controlPlaneEndpoint": "k8s.lab:6443",
        "kubernetes.podSubnet": "10.50.0.0/16", "kubernetes.serviceSubnet": "10.60.0.0/16",
        "kubernetes.cni": "cilium", "kubernetes.dedicatedManagers": "true",
        "kubernetes.certificateRenewal": "2026-11",
        "kubernetes.allowDowngrade": "false",
        "kubernetes.imageRepository": "mirror.lab:5000/k8s",
        "kubernetes.sandboxImage": "mirror.lab:5000/k8s/pause:3.10",
        "cluster.labels": "env=prod,tier=gold", "cluster.labels.env": "prod",
        "cluster.labels.tier": "gold"}


def test_unset_settings_render_as_their_defaults_or_empty() -> None:
    values = template_values(spec(), machine("m1", "manager"), [])
    assert (values["kubernetes.version"], values["kubernetes.controlPlaneEndpoint"],
            values["kubernetes.podSubnet"], values["kubernetes.serviceSubnet"],
            values["kubernetes.cni"], values["kubernetes.dedicatedManagers"],
            values["cluster.labels"]) == ("", "", "10.244.0.0/16", "10.96.0.0/12", "calico",
                                          "false", "")
    assert values["kubernetes.imageRepository"] == "registry.k8s.io"


@pytest.mark.parametrize(("version", "pause"), [
    ("1.31.0", "3.10"), ("1.33.4", "3.10"), ("1.34.0", "3.10.1"), ("1.35.2", "3.10.1"),
    ("1.30.9", "3.10"), ("1.40.0", "3.10.1"), (None, "3.10.1")])
def test_the_sandbox_image_is_kubeadms_pause_of_the_version(version: str | None,
                                                            pause: str) -> None:
    """kubeadm's PauseVersion per minor (its constants.go): before the table, its first row;
    past it, the last."""
    assert sandbox_image(KubernetesSettings(version=version)) == f"registry.k8s.io/pause:{pause}"


@pytest.mark.parametrize(("kubernetes", "message"), [
    ("{version: v1.31.2}", "line 4: settings.kubernetes.version: 'v1.31.2' must be a version "
     "such as 1.31.2"),
    ("{version: '1.31'}", "settings.kubernetes.version: '1.31' must be a version"),
    ("{controlPlaneEndpoint: 'k8s.lab:70000'}",
     "settings.kubernetes.controlPlaneEndpoint: port '70000' must be a number from 1 to 65535"),
    ("{controlPlaneEndpoint: 'fd00::10'}",
     "settings.kubernetes.controlPlaneEndpoint: an IPv6 address goes in brackets: [fd00::10]"),
    ("{controlPlaneEndpoint: 'https://k8s.lab'}",
     "settings.kubernetes.controlPlaneEndpoint: a host[:port], not a URL: write k8s.lab"),
    ("{controlPlaneEndpoint: 'k8s_lab'}",
     "settings.kubernetes.controlPlaneEndpoint: 'k8s_lab' is not a host name or IPv4 address"),
    ("{podSubnet: 10.244.0.1/16}",
     "settings.kubernetes.podSubnet: 10.244.0.1/16 has host bits set: did you mean "
     "10.244.0.0/16?"),
    ("{serviceSubnet: ten}", "settings.kubernetes.serviceSubnet: 'ten' is not a CIDR"),
    ("{podSubnet: 10.96.0.0/16}", "settings.kubernetes: podSubnet 10.96.0.0/16 overlaps "
     "serviceSubnet 10.96.0.0/12"),
    ("{cni: flannel}", "settings.kubernetes.cni: Input should be 'calico', 'cilium' or 'none'"),
    ("{labels: {'team a': x}}", "settings.kubernetes.labels: label key 'team a': its name "
     "must be 1 to 63 characters"),
    ("{imageRepository: 'https://mirror.lab/k8s'}", "settings.kubernetes.imageRepository: "
     "'https://mirror.lab/k8s' must be a registry and path such as registry.k8s.io"),
    ("{imageRepository: 'mirror.lab/k8s/'}", "settings.kubernetes.imageRepository: "
     "'mirror.lab/k8s/' must be a registry and path"),
    ("{imageRepository: 'Mirror.lab'}", "settings.kubernetes.imageRepository: 'Mirror.lab' "
     "must be a registry and path"),
])
def test_a_malformed_setting_is_refused_naming_its_field(kubernetes: str, message: str) -> None:
    assert message in refusal(kubernetes)


@pytest.mark.parametrize("endpoint", ["k8s.lab", "k8s.lab:6443", "10.0.0.10", "10.0.0.10:443",
                                      "[fd00::10]", "[fd00::10]:6443"])
def test_an_endpoint_is_a_host_with_an_optional_port(endpoint: str) -> None:
    assert spec(f"{{controlPlaneEndpoint: '{endpoint}'}}").settings.kubernetes \
        .control_plane_endpoint == endpoint


NETWORKING = '{controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.50.0.0/16, cni: calico}'


def test_networking_cannot_change_once_a_manager_deployed_and_the_refusal_names_each_field(
        ) -> None:
    before, after = spec(NETWORKING), spec('{controlPlaneEndpoint: "k8s.lab:6443", '
                                           'podSubnet: 10.70.0.0/16, cni: cilium}')
    m1 = machine("m1", "manager", state=MachineState.DEPLOY)
    with pytest.raises(Conflict) as refused:
        check_fixed(before, after, [m1, machine("w1", state=MachineState.PREPARE)])
    assert str(refused.value) == (
        "cluster lab not applied: settings.kubernetes.podSubnet cannot change from "
        "10.50.0.0/16 to 10.70.0.0/16: the cluster's networking is fixed once the first manager "
        "deployed (m1 is Deploy); keep the value, or create a new cluster for the new one; "
        "settings.kubernetes.cni cannot change from calico to cilium: the cluster's networking "
        "is fixed once the first manager deployed (m1 is Deploy); keep the value, or create a "
        "new cluster for the new one")


def test_before_any_manager_deployed_networking_may_change() -> None:
    preparing = [machine("m1", "manager", state=MachineState.PREPARE),
                 machine("w1", state=MachineState.READY)]
    check_fixed(spec(NETWORKING), spec('{podSubnet: 10.70.0.0/16, cni: none}'), preparing)


def test_a_deployed_manager_being_deleted_still_fixes_the_networking() -> None:
    leaving = replace(machine("m1", "manager", state=MachineState.DELETING), deploy_order=1)
    with pytest.raises(Conflict, match=r"controlPlaneEndpoint cannot change from k8s\.lab:6443 "
                       "to unset"):
        check_fixed(spec(NETWORKING), spec('{podSubnet: 10.50.0.0/16}'), [leaving])


def test_the_other_kubernetes_settings_may_change_after_the_first_manager_deployed() -> None:
    ready = [machine("m1", "manager", state=MachineState.READY)]
    check_fixed(spec(NETWORKING), spec(
        '{controlPlaneEndpoint: "k8s.lab:6443", podSubnet: 10.50.0.0/16, version: 1.32.0, '
        'dedicatedManagers: true, labels: {env: prod}, kubeconfig: /etc/k.conf}'), ready)
