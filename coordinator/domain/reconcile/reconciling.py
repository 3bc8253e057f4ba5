"""A reconcile pass over one cluster, decided whole: from the machines the pass loaded, the
complete change it writes (a `domain/changes.py:Change`: machines, events, the outputs the
cluster keeps, the machines it removes, the cluster itself once a deleted one is empty) and
whom it wakes, so that the service makes one call here, one store transaction and one
wake-up. What the pass found while loading (machines whose heartbeats stopped or came back,
`checked`) is part of the change; the rest is the planner's, the outputs', the minting's
and the notices' share, in that order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.assignments.assignment import waits_notices
from coordinator.domain.assignments.minting import mint_pass
from coordinator.domain.changes import Change
from coordinator.domain.events import event
from coordinator.domain.machines.pooling import returned
from coordinator.domain.model import ClusterSpec, Machine, MachineState, reset_skipped
from coordinator.domain.reconcile import liveness
from coordinator.domain.records import ClusterOutput, Event, StoredCluster
from coordinator.domain.rollout import planner
from coordinator.domain.specs.outputs import adopted


@dataclass(frozen=True)
class ClusterPass:
    """A pass's decision: its change, the planner's decisions, the machines as they are once
    it is written (`current`, for the node tasks), where the post-deploy step runs, and the
    cluster as it is then (with the outputs it keeps)."""

    change: Change
    decisions: list[planner.Decision]
    current: list[Machine]
    post_deploy_host: str | None
    stored: StoredCluster

    @property
    def cluster_emptied(self) -> bool:
        """A cluster being deleted whose last machine went: the cluster goes too, in the
        same change."""
        return bool(self.change.dropped)


def checked_responding(spec: ClusterSpec, machines: Sequence[Machine],
                       last_heard: Mapping[str, float], now: float,
                       listening_since: float) -> tuple[list[Machine], Change]:
    """The machines with `responding` as their last heartbeat says now (liveness.responding),
    and the change that records the ones that changed, with an event each."""
    timeout = spec.settings.heartbeat_timeout_seconds
    checked, changed, events = [], [], []
    for machine in machines:
        heard = last_heard[machine.id]
        answers = liveness.responding(machine.responding, heard, now, timeout, listening_since)
        if answers != machine.responding:
            events.append(event(
                now, spec.name, "responding" if answers else "not-responding",
                f"{machine.hostname} " + ("answers again" if answers else
                                          f"missed heartbeats for {now - heard:.0f}s"), machine))
            machine = replace(machine, responding=answers)
            changed.append(machine)
        checked.append(machine)
    return checked, Change(machines=changed, events=events)


def decide_pass(stored: StoredCluster, machines: Sequence[Machine], now: float,
                checked: Change | None = None) -> ClusterPass:
    """The pass over the cluster's working set `machines` (every manager among them), after
    the change its load found (`checked`, checked_responding's): outputs kept, the planner
    run to its fixpoint, the assignment notices, join material minted, the outputs waited
    on; a cluster being deleted whose last machine goes is removed with it."""
    spec = stored.spec
    checked = checked or Change()
    changed = {m.id: m for m in checked.machines}
    stored, outputs, events = _keep_outputs(stored, machines, now)
    events = [*checked.events, *events]
    after, decisions = planner.plan_to_fixpoint(spec, machines, now)
    by_id = {m.id: m for m in after}
    before = {m.id: m for m in machines}
    back = {d.machine_id: returned(before[d.machine_id], "its reset items ran", now)
            for d in decisions if d.to_state is None and before[d.machine_id].claim
            and not reset_skipped(before[d.machine_id])}
    events += [back[d.machine_id][1] if d.machine_id in back else
               decision_event(now, spec.name, d, by_id.get(d.machine_id)) for d in decisions]
    changed.update({m.id: m for m in after if m != before.get(m.id)})
    changed.update({machine_id: machine for machine_id, (machine, _) in back.items()})
    host = planner.post_deploy_host(spec, after)
    events += _notices(spec, after, changed, now)
    after, minted = _values(stored, [changed.get(m.id, m) for m in after], host, now, changed)
    events += minted
    events += _post_deploy_in_place(spec, host, after, decisions, now)
    removed = {d.machine_id: now for d in decisions
               if d.to_state is None and d.machine_id not in back}
    current = [changed.get(m.id, m) for m in after]
    emptied = stored.deleting and not current
    if emptied:
        events.append(event(now, spec.name, "cluster-removed", f"cluster {spec.name} removed"))
    change = Change(machines=list(changed.values()), events=events, removed=removed,
                    outputs={spec.name: outputs} if outputs else {},
                    dropped=[spec.name] if emptied else [], wake=[*changed, *removed])
    return ClusterPass(change, decisions, current, host.id if host else None, stored)


def _keep_outputs(stored: StoredCluster, machines: Sequence[Machine], now: float,
                  ) -> tuple[StoredCluster, dict[str, ClusterOutput], list[Event]]:
    """The outputs the cluster is to keep that its managers produced and it does not keep yet
    (outputs.adopted; the working set holds every manager, one this pass removes too), each
    with an event naming where it came from (never its value), and the cluster as it is once
    they are written."""
    outputs = adopted(stored.outputs, machines, now)
    events = [event(now, stored.spec.name, "output-kept",
                    f"the cluster keeps ${{outputs.{name}}} as {kept.hostname} produced it",
                    data={"output": name, "machine": kept.machine})
              for name, kept in outputs.items()]
    if outputs:
        stored = replace(stored, outputs={**stored.outputs, **outputs})
    return stored, dict(outputs), events


def _notices(spec: ClusterSpec, after: Sequence[Machine], changed: dict[str, Machine],
             now: float) -> list[Event]:
    """The machines whose assignment changed while their state did not (the post-deploy step
    given or taken, a reconfiguring machine's manager list) go into the pass's machines, and
    an event says where the post-deploy step now runs."""
    was = {m.id: m for m in after}
    events = []
    for noticed in planner.assignment_notices(spec, after):
        changed[noticed.id] = noticed
        if noticed.post_deploy and not was[noticed.id].post_deploy:
            events.append(event(now, spec.name, "post-deploy",
                                f"post-deploy step runs on {noticed.hostname}", noticed))
    return events


def _values(stored: StoredCluster, after: Sequence[Machine], host: Machine | None, now: float,
            changed: dict[str, Machine]) -> tuple[list[Machine], list[Event]]:
    """Join material minted, expired or revoked (minting.py), and the machines whose items
    wait for other outputs than they did, into the pass's machines: the machines as they are
    then, and the minting's events."""
    spec = stored.spec
    minted = mint_pass(spec, after, now)
    changed.update({m.id: m for m in minted.machines})
    current = [changed.get(m.id, m) for m in after]
    changed.update({m.id: m for m in waits_notices(spec, current, host.id if host else None,
                                                   stored.outputs)})
    return [changed.get(m.id, m) for m in current], list(minted.events)


def _post_deploy_in_place(spec: ClusterSpec, host: Machine | None, after: Sequence[Machine],
                          decisions: Sequence[planner.Decision], now: float) -> list[Event]:
    """Say after an upgrade that the post-deploy step's version was already in place (host:
    where the step runs now, if anywhere)."""
    upgraded = any(d.from_state is MachineState.UPGRADE for d in decisions)
    if upgraded and host is None and spec.items("manager", "postdeploy") \
            and planner.upgrade_settled(spec, after):
        return [event(now, spec.name, "post-deploy",
                      f"upgrade to {spec.release} done; the post-deploy items at this version "
                      "were already applied (none has a versionCommand to check what is "
                      "installed)")]
    return []


def decision_event(now: float, cluster: str, decision: planner.Decision, after: Machine | None) -> Event:
    """A planner decision as history: the state change and why."""
    to = decision.to_state.value if decision.to_state else None
    return event(now, cluster, "state",
                 f"{decision.hostname} {decision.from_state.value} -> {to or 'removed'}: "
                 f"{decision.reason}", after,
                 {"from": decision.from_state.value, "to": to, "reason": decision.reason},
                 machine_id=decision.machine_id, hostname=decision.hostname)
