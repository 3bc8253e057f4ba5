"""What the tests, the bench scripts and the demo send and store, built in one place: cluster
specs (as the API takes them and as models), machines, and what an agent sends (precheck
reports, registrations, item reports). A change to one of these formats is made here once."""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import pytest

from coordinator.domain.changes import Change
from coordinator.domain.errors import Conflict
from coordinator.domain.model import (
    DEPLOYED_STATES,
    PHASE_OF_STATE,
    ClusterSpec,
    DrainStage,
    DrainStatus,
    ItemProgress,
    Machine,
    MachineState,
    MachineTypes,
    Material,
    MintJob,
    NodeStatus,
    Role,
    pending_items,
)
from coordinator.domain.nodes.nodes import desired_metadata, observed
from coordinator.domain.records import Event
from coordinator.domain.releases.releases import baseline
from coordinator.domain.rollout.planner import Decision
from coordinator.store.cipher import Cipher
from nodeagent.prechecks import CHECKS
from nodeagent.prechecks.machine_identity import evaluate as evaluate_identity
from nodeagent.prechecks.resources import evaluate_cpu, evaluate_memory
from nodeagent.prechecks.runner import grade, summarize
from nodeagent.wire.protocol import CheckResult, Phase, PrecheckReport, Severity, StateItem, Status

# -- cluster specs as the API takes them: exact texts, which tests edit with str.replace --------

# The in-process API tests' cluster: a reset item, and a heartbeat timeout tests step past.
API_CLUSTER = """\
name: lab
release: "1.0"
settings: {workerBatchSize: 2, heartbeatTimeoutSeconds: 30}
machineTypes:
  manager:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
    - {name: wipe, phase: reset, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: setup, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}
"""

# The same, approving every machine as a manager once its hard prechecks pass.
AUTO_APPROVE_CLUSTER = API_CLUSTER.replace(
    "settings: {", "settings: {autoApprove: true, autoApproveRole: manager, ")

# The served coordinator's cluster, for the CLI, dashboard and operator tests: exec items that
# never run (simulated agents report them), two of them in a worker's Prepare.
OPERATOR_CLUSTER = """\
name: lab
release: "1.0"
settings: {workerBatchSize: 2}
machineTypes:
  manager:
    - {name: base, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: control-plane, phase: deploy, action: {type: exec, argv: ["true"]}}
  worker:
    - {name: base, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: runtime, phase: prepare, action: {type: exec, argv: ["true"]}}
    - {name: join, phase: deploy, action: {type: exec, argv: ["true"]}}
"""

# Outputs and join material, kubeadm-shaped: the first manager's init produces the CA's hash
# (secret) and the endpoint (public), mint items mint a token and a certificate key per joiner,
# a revoke item deletes the token once used.
MINTING_CLUSTER = """\
name: edge
release: "1"
machineTypes:
  manager:
    - name: init
      phase: deploy
      when: {firstManager: true}
      action: {type: exec, argv: [kubeadm, init]}
      outputs: [{name: caCertHash}, {name: endpoint, secret: false}]
    - name: token
      phase: mint
      lifetimeSeconds: 60
      action: {type: exec, argv: [kubeadm, token, create, --ttl, "${mint.lifetimeSeconds}s"]}
      outputs: [{name: token}]
    - name: certkey
      phase: mint
      action: {type: exec, argv: [kubeadm, init, phase, upload-certs, --upload-certs]}
      outputs: [{name: key}]
    - name: join
      phase: deploy
      when: {firstManager: false}
      action: {type: exec, argv: [kubeadm, join, "${outputs.init.endpoint}", --token,
               "${outputs.token.token}", --certificate-key, "${outputs.certkey.key}"]}
    - name: forget-token
      phase: revoke
      action: {type: exec, argv: [kubeadm, token, delete, "${outputs.token.token}"]}
  worker:
    - name: join
      phase: deploy
      action: {type: exec, argv: [kubeadm, join, "${outputs.init.endpoint}", --token,
               "${outputs.token.token}", --discovery-token-ca-cert-hash,
               "${outputs.init.caCertHash}"]}
"""

# One worker item that does nothing: for tests about the API and trust, not the rollout.
NOOP_CLUSTER = """\
name: lab
release: "1"
machineTypes:
  worker:
    - {name: noop, phase: prepare, action: {type: exec, argv: ["true"]}}
"""


# A manager and a worker whose upgrade drains it, through the Kubernetes API of the kubeconfig
# filled in (str.format: release, kubeconfig).
DRAINING_CLUSTER = """\
name: lab
release: "{release}"
settings:
  drain: {{timeoutSeconds: 120, evictionRetrySeconds: 0.2, gracePeriodSeconds: 0}}
  kubernetes: {{kubeconfig: {kubeconfig}}}
machineTypes:
  manager:
    - {{name: control-plane, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
  worker:
    - {{name: join, phase: deploy, action: {{type: exec, argv: ["true"]}}}}
    - {{name: kubelet, phase: upgrade, version: "{release}", action: {{type: exec, argv: ["true"]}}}}
"""


# -- decisions as the tests read them --------------------------------------------------------------

class Decided(NamedTuple):
    """A decision about one machine, read as the tests read it: that machine and its events."""

    machine: Machine
    events: list[Event]


def decided(change: Change) -> Decided:
    """The one machine a change writes, and its events."""
    (machine,) = change.machines
    return Decided(machine, list(change.events))


def change_or_refusal(decide: Callable[[], Change], refused: str | None) -> Change | None:
    """What a table row expects of a decision: its change, or (refused: the message it
    matches) a Conflict and nothing decided (None)."""
    if refused is None:
        return decide()
    with pytest.raises(Conflict, match=refused):
        decide()
    return None


# -- cluster specs as models ---------------------------------------------------------------------

@functools.cache  # items are frozen; validating them is the slow part of building a spec
def item(name: str, phase: Phase) -> StateItem:
    """An exec item that runs `true name`: succeeds wherever it runs."""
    return StateItem.model_validate({"name": name, "phase": phase,
                                     "action": {"type": "exec", "argv": ["true", name]}})


def items(phase: Phase, count: int, prefix: str = "") -> list[StateItem]:
    return [item(f"{prefix}{phase}-{i}", phase) for i in range(count)]


# One prepare item: a spec with something in it, for the tests of storing specs.
ONE_ITEM = (item("sysctl", "prepare"),)


# Settings that give the coordinator a way to the cluster's Kubernetes API: its machines'
# Nodes are waited for, and its upgrades drain (model.kubernetes_access).
KUBE_ACCESS = {"kubernetes": {"kubeconfig": "/etc/coordinator/kubeconfig"}}


def cluster(manager: Sequence[StateItem] = (), worker: Sequence[StateItem] = (),
            batch: int | None = None, *, name: str = "edge", release: str = "1.0.0",
            **settings: Any) -> ClusterSpec:
    """A spec of these items; batch is settings.workerBatchSize, settings the other settings
    (camelCase, as a spec file spells them). Unset settings keep their defaults."""
    if batch is not None:
        settings["workerBatchSize"] = batch
    return ClusterSpec.model_validate({
        "name": name, "release": release, "settings": settings,
        "machineTypes": MachineTypes(manager=list(manager), worker=list(worker)),
    })


def spec_text(spec: ClusterSpec) -> str:
    """spec as a body for PUT /v1/clusters (JSON, which is YAML too)."""
    return spec.model_dump_json(by_alias=True, exclude_unset=True)


def upgraded_cluster(spec: ClusterSpec, release: str = "2.0.0", **upgrade: object) -> ClusterSpec:
    """spec with upgrade settings changed; at another release, with that release's upgrade
    item (one per role) in place of the previous ones."""
    settings = spec.settings.model_copy(
        update={"upgrade": spec.settings.upgrade.model_copy(update=upgrade)})
    if release == spec.release:
        return spec.model_copy(update={"settings": settings})
    types = MachineTypes(**{
        role: [*(i for i in getattr(spec.machine_types, role) if i.phase != "upgrade"),
               item(f"upgrade-{role}-{release}", "upgrade")]
        for role in ("manager", "worker")})
    return spec.model_copy(update={"release": release, "settings": settings,
                                   "machine_types": types})


def node_down(spec: ClusterSpec, m: Machine) -> Machine:
    """m with its Node found NotReady by the node watch (its agent still answers)."""
    ready_node = observed(None, 0.0, f"{m.hostname}.lab", ("True", "KubeletReady", ""),
                          desired_metadata(spec, m).digest())
    return replace(m, node=observed(ready_node, 10.0, f"{m.hostname}.lab",
                                    ("Unknown", "NodeStatusUnknown", "Kubelet stopped")))


# -- what an agent sends -------------------------------------------------------------------------

CHECK = {check.name: check for check in CHECKS}
# (check, message) of a hard precheck failure
FOREIGN_OS = ("os", "Plan 9 is not supported")
OLD_KERNEL = ("kernel", "kernel too old")
HOST_CPUS, HOST_MEMORY = 8, 32 << 30  # what a simulated agent's host has
FACTS = {"cpus": HOST_CPUS, "memory_bytes": HOST_MEMORY, "kernel": "6.1.0-18-amd64",
         "os": {"id": "debian", "version_id": "12"}, "interfaces": ["eth0", "eth1"]}


def precheck_report(hostname: str, role: Role = "worker", failing: tuple[str, str] | None = None,
                    checks: int = 4, cpus: int = HOST_CPUS, memory: int = HOST_MEMORY,
                    identity: tuple[str, list[str]] | None = None) -> dict[str, Any]:
    """A precheck report as the agent sends it for role: checks os and kernel pass, or the one
    failing names fails hard with its message; cpu and memory are the agent's own checks of
    what it measured (cpus, memory bytes); more checks (13 is a real agent's count) pass;
    identity: its machine-identity check's product_uuid and MACs."""
    results = [
        *(CheckResult(name=name, severity=Severity.HARD,
                      status=Status.FAIL if failing and failing[0] == name else Status.PASS,
                      message=failing[1] if failing and failing[0] == name else "ok",
                      duration=0.01) for name in ("os", "kernel")),
        grade(CHECK["cpu"], evaluate_cpu(cpus, role), 0.01, frozenset()),
        grade(CHECK["memory"], evaluate_memory(memory, role), 0.01, frozenset()),
        *(CheckResult(name=f"check-{n}", severity=Severity.HARD, status=Status.PASS,
                      message="ok", data={"value": n}, duration=0.01) for n in range(4, checks)),
        *([grade(CHECK["machine-identity"], evaluate_identity(*identity), 0.01, frozenset())]
          if identity else [])]
    return PrecheckReport(hostname=hostname, role=role, started_at=1.0, duration=0.1,
                          ok=not any(r.status is Status.FAIL for r in results),
                          summary=summarize(results),
                          checks=results).model_dump(mode="json", by_alias=True)


def node_facts(primary: str = "192.0.2.10", cluster: str = "10.10.0.5") -> dict[str, Any]:
    """Facts as `nodeagent facts` reports them for a node with a default-route interface
    (eth0, primary), a cluster network (eth1: cluster and fd10::5), an interface with only a
    link-local address (eth2), and disks: sda holds /, sdb is empty, sdc's partition is an
    LVM volume's, sr0 is removable, sdd read-only."""
    def interface(name: str, *addresses: tuple[str, str, int]) -> dict[str, Any]:
        return {"name": name, "mac": "02:00:00:00:00:01", "state": "UP", "mtu": 1500,
                "addresses": [{"family": family, "address": address, "prefixlen": length}
                              for family, address, length in addresses]}

    def disk(name: str, **use: Any) -> dict[str, Any]:
        return {"name": name, "size_bytes": 100 << 30, "rotational": False, "removable": False,
                "read_only": False, "model": "QEMU HARDDISK", "partitions": [], "mounts": [],
                "holders": [], "in_use": bool(use.get("mounts") or use.get("holders")), **use}

    return {
        "hostname": "node", "primary_ip": primary, "default_interface": "eth0",
        "interfaces": [interface("lo", ("inet", "127.0.0.1", 8), ("inet6", "::1", 128)),
                       interface("eth0", ("inet", primary, 24), ("inet6", "fe80::1", 64)),
                       interface("eth1", ("inet", cluster, 24), ("inet6", "fd10::5", 64)),
                       interface("eth2", ("inet6", "fe80::2", 64))],
        "block_devices": [disk("sda", partitions=["sda1"], mounts=["/"]), disk("sdb"),
                          disk("sdc", partitions=["sdc1"], holders=["dm-0"]),
                          disk("sr0", removable=True), disk("sdd", read_only=True)],
    }


def credential(seed: str) -> str:
    """A machine credential as an agent chooses one (random-looking), the same for a seed."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "machine_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def registration(hostname: str, join_token: str, failing: bool = False,
                 facts: dict[str, Any] | None = None, **report: Any) -> dict[str, Any]:
    """The body an agent on hostname sends to register; failing: its OS fails a hard check;
    report: the rest of its precheck report (see precheck_report)."""
    return {"join_token": join_token, "hostname": hostname, "ip": "127.0.0.1",
            "facts": facts or {},
            "precheck": precheck_report(hostname, failing=FOREIGN_OS if failing else None,
                                        **report)}


def fingerprint(item: dict[str, Any]) -> str:
    """The fingerprint an agent reports for an item of its assignment."""
    return StateItem.model_validate(item).fingerprint()


def item_report(item: dict[str, Any], phase: str, status: str = "succeeded",
                **fields: Any) -> dict[str, Any]:
    """The report of one item of an assignment, first attempt, that ran from 1.0 to 2.0;
    fields (output, exit_code, started_at...) add to or replace those."""
    return {"item": item["name"], "fingerprint": fingerprint(item), "phase": phase,
            "status": status, "attempt": 1, "started_at": 1.0, "finished_at": 2.0, **fields}


# -- machines --------------------------------------------------------------------------------------

def machine(
    hostname: str,
    role: Role | None = "worker",
    *,
    approved: bool = True,
    hard_failure: bool = False,
    state: MachineState = MachineState.PENDING,
    created_at: float = 0.0,
    release: str | None = None,
) -> Machine:
    """A machine of the cluster `edge`, as the planner sees it; hard_failure: its kernel fails
    a hard precheck. A deployed one is at the release cluster() specs are at, unless told.
    Registered, it has a credential (one revoked has none: remedies.py says so)."""
    if release is None:
        release = "1.0.0" if state in DEPLOYED_STATES else ""
    return Machine(
        id=f"id-{hostname}", cluster="edge", hostname=hostname, ip=None,
        state=state, role=role, approved=approved, created_at=created_at, release=release,
        credential_hash=f"cred-{hostname}",
        precheck=precheck_report(hostname, role or "worker", OLD_KERNEL if hard_failure else None),
    )


def finish_phase(spec: ClusterSpec, m: Machine, managers: tuple[str, ...] = ()) -> Machine:
    """The agent applied every item of the machine's current phase (reconfigure items for the
    given manager list)."""
    phase = PHASE_OF_STATE.get(m.state)
    if phase is None:
        return m
    done = {i.fingerprint() for i in pending_items(spec, m, phase, managers)}
    return replace(m, applied=m.applied | done)


def at_release(spec: ClusterSpec, m: Machine) -> Machine:
    """m as the planner leaves a machine that deployed or upgraded at spec's release: recorded
    at it, with the release's upgrade items of its role as its baseline."""
    assert m.role is not None
    return replace(m, release=spec.release, applied=m.applied | baseline(spec, m.role))


def drained(m: Machine, stage: DrainStage = DrainStage.DRAINED) -> Machine:
    """The coordinator's Kubernetes side got the machine's node to stage."""
    return replace(m, drain=DrainStatus(stage, started_at=0.0))


def moves(decisions: Sequence[Decision]) -> list[tuple[str, MachineState | None]]:
    """Each decision as (hostname, the state it moves the machine to)."""
    return [(d.hostname, d.to_state) for d in decisions]


def full_machine(machine_id: str = "m-1", cluster: str = "edge", **changes: Any) -> Machine:
    """A machine with every field away from its default, so a lossy round trip shows."""
    full = Machine(
        id=machine_id,
        cluster=cluster,
        hostname=f"host-{machine_id}",
        ip="10.0.0.7",
        state=MachineState.DEPLOY,
        role="worker",
        approved=True,
        facts={"cpus": 4, "memory": 8.5, "os": {"id": "debian", "version": "12"}, "tags": []},
        precheck={"ok": True, "checks": [{"name": "kernel", "status": "pass"}]},
        applied=frozenset({"a" * 32, "b" * 32}),
        upgrading=frozenset({"b" * 32}),
        first_upgrader=True,
        progress=ItemProgress(item="kubelet", attempt=2, status="failed", error="exit 1",
                              next_retry_at=17.5, updated_at=16.25, failing_since=14.0,
                              gave_up=True),
        created_at=1.5,
        state_since=2.5,
        last_seen=3.5,
        generation=4,
        credential_hash=f"cred-{machine_id}",
        reissue_hash=f"reissue-{machine_id}",
        reissue_expires_at=5.5,
        reissue_used_at=4.5,
        responding=False,
        deploy_order=2,
        kubernetes="1.33.4",
        post_deploy=True,
        retries=2,
        clones=("machine-identity: mac 52:54:00:12:34:56 is also machine w2's",),
        member_gone=True,
        member_stop="no remaining manager is Ready and answering to remove its etcd member",
        node=NodeStatus(2.0, name=f"node-{machine_id}", ready=True, reason="KubeletReady",
                        message="kubelet is posting ready status", condition="True",
                        registered_at=2.25, ready_since=2.75, metadata="0123456789abcdef"),
    )
    return replace(full, **changes)


# -- secrets at rest ------------------------------------------------------------------------------

# The key every store of the tests seals with: fixed, so that a store reopened, or another
# replica's, opens what the first one sealed.
TEST_CIPHER = Cipher(bytes(range(32)), "the tests' secrets key")
# One secret in each part of a machine that holds some, each distinct so that a leak is named.
KUBECONFIG_SECRET = "kubeconfig-secret-7d1f"
OUTPUT_SECRET = "output-secret-2a9c"
MATERIAL_SECRET = "material-secret-93b2"
MINTING_SECRET = "minting-secret-5e0c"
SECRETS = (KUBECONFIG_SECRET, OUTPUT_SECRET, MATERIAL_SECRET, MINTING_SECRET)


def with_secrets(machine: Machine) -> Machine:
    """machine holding each kind of secret: a kubeconfig, an output, join material minted for
    it and a mint job it runs for another machine."""
    return replace(
        machine, kubeconfig=f"apiVersion: v1\nusers:\n- user: {{token: {KUBECONFIG_SECRET}}}\n",
        outputs={"init.token": OUTPUT_SECRET},
        material=Material(serial=1, minter="m-0", requested_at=1.0, items=("mint-token",),
                          values={"outputs.mint-token.token": MATERIAL_SECRET}, minted_at=2.0,
                          expires_at=902.0),
        minting=MintJob(kind="mint", joiner="m-9", hostname="host-m-9", ip="10.0.0.9",
                        role="worker", serial=1, items=("mint-token",),
                        values={"token": MINTING_SECRET}))


def fleet_machine(index: int, cluster: str = "bench") -> Machine:
    """A Ready worker of a bench fleet, with documents the size an agent sends: its facts and
    a 13-check precheck report, 20 items applied."""
    hostname = f"node-{index:05d}"
    return Machine(
        id=f"machine-{index:05d}", cluster=cluster, hostname=hostname,
        ip=f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
        state=MachineState.READY, role="worker", approved=True, facts=FACTS,
        precheck=precheck_report(hostname, checks=13),
        applied=frozenset(f"{index:08d}{item:024d}" for item in range(20)),
        progress=ItemProgress(item="kubelet", attempt=1, status="succeeded", updated_at=1.0),
        credential_hash=f"{index:064d}",
    )
