"""The kubeadm profile (examples/kubeadm/cluster.yaml) as tests take it: its spec, a fleet whose
first manager produced its outputs and whose joiners hold join material, and what a machine's
agent would run in a phase, secrets filled in (`cluster render` masks them; tests need them)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from coordinator.domain.model import ClusterSpec, Machine, Material
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.views.rendering import machine_values, render_item, shown_items
from nodeagent.wire.contract import Phase

PROFILE = Path(__file__).parents[2] / "examples/kubeadm/cluster.yaml"
# kubeadm's phases the profile's init and join run one at a time (phases.sh), in order, by the
# names the kubeadm double's phase boundaries carry (`m1:init:certs`).
INIT_PHASES = ["preflight", "certs", "kubeconfig", "etcd", "control-plane", "kubelet-start",
               "wait-control-plane", "upload-config", "upload-certs", "mark-control-plane",
               "bootstrap-token", "kubelet-finalize", "addon"]
MANAGER_JOIN_PHASES = ["preflight", "control-plane-prepare", "kubelet-start", "etcd-join",
                       "control-plane-join"]
WORKER_JOIN_PHASES = ["preflight", "kubelet-start"]


def profile_spec(**kubernetes: object) -> ClusterSpec:
    """The profile, with these settings.kubernetes fields (control_plane_endpoint="lb") set."""
    spec = load_spec(PROFILE.read_text(), str(PROFILE))
    settings = spec.settings.model_copy(
        update={"kubernetes": spec.settings.kubernetes.model_copy(update=kubernetes)})
    return spec.model_copy(update={"settings": settings})


def deployed(machines: list[Machine], outputs: Mapping[str, str],
             material: Callable[[Machine], dict[str, str]]) -> list[Machine]:
    """machines (the first one the first manager) once it produced outputs
    (`control-plane.caCertHash`: ...) and each other one holds the join material
    (`outputs.token.token`: ...) minted for it."""
    first = replace(machines[0], outputs=dict(outputs))
    return [first, *(replace(m, material=Material(
        serial=1, minter=first.id, requested_at=0.0, items=("token",), minted_at=0.0,
        values=material(m))) for m in machines[1:])]


def rendered(spec: ClusterSpec, machine: Machine, peers: list[Machine],
             phase: Phase) -> dict[str, dict[str, Any]]:
    """machine's items of phase, by name, as its agent fills them in: secrets included."""
    known = machine_values(spec, machine, peers).known
    return {i.name: render_item(i, known).action for i in shown_items(spec, machine, peers, phase)}


def kubeadm_config(action: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The documents of a kubeadm configuration file item, by kind."""
    return {d["kind"]: d for d in yaml.safe_load_all(action["template"])}


def write_file_item(action: Mapping[str, Any], root: Path) -> None:
    """A rendered file item, written under root as the agent writes it."""
    path = root / action["path"].lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(action.get("template", action.get("content", "")))


def run_exec_item(action: Mapping[str, Any], root: Path, env: Mapping[str, str],
                  prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """A rendered exec item, run in root (its working directory, as the agent runs it) with
    env (e.g. the doubles') and its own environment; prefix: e.g. a node's namespace
    (Namespace.argv([]))."""
    return subprocess.run([*prefix, *action["argv"]], cwd=root,
                          env={**env, **action.get("env", {})},
                          capture_output=True, text=True, timeout=60, check=False)
