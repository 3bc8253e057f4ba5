"""Folding an agent's item report into its machine, and a kubeconfig's refresh: pure, so every
rule of what a report may carry and what it changes is tested without a store or a server.
Each decides one `Change`; a group commit's batch is `combined` of its reports' changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from coordinator.domain.assignments.assignment import running_phases
from coordinator.domain.changes import Change
from coordinator.domain.durations import utc
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.model import (
    ClusterSpec,
    ItemProgress,
    Machine,
    MachineState,
    MintJob,
    items_may_run,
)
from coordinator.domain.nodes.kubeconfig import expires_sooner, kubeconfig_problem, server_of
from coordinator.domain.records import Event
from coordinator.domain.releases.runs import phase_run
from coordinator.domain.rollout.steps import gave_up_text
from coordinator.domain.specs.outputs import differing, differing_text, key
from nodeagent.wire.contract import JOB_PHASES, UNJOURNALED_PHASES
from nodeagent.wire.protocol import ItemReport, StateItem, VersionAction, installed_version
from nodeagent.wire.redact import mask_values


def reportable_items(spec: ClusterSpec, machine: Machine,
                     managers: Sequence[str]) -> dict[str, StateItem]:
    """Every item a report from machine may name, by fingerprint: those of its current
    assignment (any phase it may be running now, assignment.running_phases), with the
    reconfigure items as rendered for the deployed managers; none before it is approved. A
    report of anything else is refused before it costs the store a byte."""
    if not machine.approved:
        return {}
    return {fingerprint: i for phase in running_phases(machine)
            for i, fingerprint in phase_run(spec, machine, phase, managers)}


def fold_report(spec: ClusterSpec, managers: Sequence[str], machine: Machine,
                report: ItemReport, now: float, cluster: Mapping[str, str] | None = None,
                ) -> Change:
    """The machine once `report` is in, the events that say what happened, and a pass asked
    for when the item succeeded (the machine may move on). Raises Conflict for a report that does not fit: an
    item that is not in the machine's current assignment (reportable_items) or under another
    name, or a kubeconfig from an item that may not send one. cluster: the cluster's outputs
    (outputs.cluster_outputs), which an output produced with another value never replaces:
    an event says so."""
    job = report.phase in UNJOURNALED_PHASES  # a job's or a remedy's item: versioned by it
    item = reportable_items(spec, machine, managers).get(report.fingerprint)
    if item is None or item.name != report.item or item.phase != report.phase:
        state = machine.state.value + ("" if machine.approved else ", not approved")
        raise Conflict(f"item {report.item[:64]} ({report.fingerprint}): not an item of the "
                       f"current assignment of {machine.hostname} ({state})")
    succeeded = report.status == "succeeded"
    applied = machine.applied | {report.fingerprint} if succeeded and not job \
        else machine.applied
    kubeconfig, kubeconfig_events = _kubeconfig(spec, machine, item, report, now)
    produced = _outputs(item, report)
    report = _masked(report, machine, produced)
    updated = replace(
        machine, applied=applied, last_seen=now, responding=True, kubeconfig=kubeconfig,
        outputs={**machine.outputs, **{f"{item.name}.{n}": v for n, v in produced.items()}}
        if produced and not job else machine.outputs,
        minting=_job_done(machine.minting, item, produced)
        if report.phase in JOB_PHASES and succeeded else machine.minting,
        remedy_done=(*machine.remedy_done, item.name)
        if report.phase == "remedy" and succeeded and item.name not in machine.remedy_done
        else machine.remedy_done,
        progress=ItemProgress(item=report.item, attempt=report.attempt, status=report.status,
                              error=report.error, next_retry_at=report.next_retry_at,
                              updated_at=now,
                              failing_since=failing_since(machine.progress, report, now),
                              gave_up=report.gave_up),
    )
    reported = event(now, machine.cluster, "item", describe(report, machine), updated, {
        "item": report.item, "phase": report.phase, "state": machine.state.value,
        "status": report.status,
        "attempt": report.attempt, "exit_code": report.exit_code,
        "duration": (report.finished_at - report.started_at) if report.finished_at else None,
        "error": report.error, "output": report.output, "gave_up": report.gave_up,
    })
    differ = differing(replace(machine, outputs={f"{item.name}.{n}": v for n, v in
                                                 produced.items()}), cluster or {}) \
        if produced and not job else []
    differs = [event(now, machine.cluster, "output-differs",
                     f"{machine.hostname}: {differing_text(differ, {})}", updated,
                     {"outputs": differ})] if differ else []
    return Change(machines=[updated], events=[
        reported, *kubeconfig_events, *differs,
        *_post_deploy_check(spec, updated, item, report, now)], kick=succeeded)


def _masked(report: ItemReport, machine: Machine, produced: dict[str, str]) -> ItemReport:
    """The report with every secret the coordinator knows of the machine masked in its output
    and error, whatever the agent masked: the outputs it reports and holds, its join material,
    and its job's (an agent older than outputs, or a command printing another's token)."""
    known = [*produced.values(), *machine.outputs.values(),
             *(machine.material.values.values() if machine.material else ()),
             *(machine.minting.values.values() if machine.minting else ())]
    if not known:
        return report
    return report.model_copy(update={"output": mask_values(report.output, known),
                                     "error": mask_values(report.error, known)})


def _outputs(item: StateItem, report: ItemReport) -> dict[str, str]:
    """The outputs a succeeded report of item carries: every one it declares, no other."""
    if report.status != "succeeded" or not item.outputs:
        if report.outputs:
            raise Conflict(f"outputs: item {item.name} declares none, or did not succeed: its "
                           "report cannot carry any")
        return {}
    declared = {o.name for o in item.outputs}
    given = report.outputs or {}
    if set(given) != declared:
        raise Conflict(f"outputs: item {item.name} declares {', '.join(sorted(declared))}; its "
                       f"report carries {', '.join(sorted(given)) or 'none'}")
    return dict(given)


def _job_done(job: MintJob | None, item: StateItem, produced: dict[str, str]) -> MintJob | None:
    """The job once its item succeeded: the item done, and (mint) its outputs kept for the
    machine the job is for."""
    if job is None:
        return None
    values = {**job.values, **{key(item.name, n): v for n, v in produced.items()}}
    return replace(job, done=(*job.done, item.name) if item.name not in job.done else job.done,
                   values=values if job.kind == "mint" else job.values)


def _kubeconfig(spec: ClusterSpec, machine: Machine, item: StateItem, report: ItemReport,
                now: float) -> tuple[str, list[Event]]:
    """The kubeconfig the machine holds once this report is in, and the event saying it
    changed. The kubeconfig itself goes into no event: only who sent it, from where. Drains
    go through it, so only the item that declares kubeconfigFrom may bring one, while the
    machine's assignment holds it: fold_report took only an item of its current assignment
    under its phase, and an upgrade's items are handed out only once its drain allows."""
    if report.kubeconfig is None:
        return machine.kubeconfig, []
    if item.kubeconfig_from is None or machine.role != "manager" or report.status != "succeeded":
        raise Conflict(f"kubeconfig: item {item.name} is not a manager item with kubeconfigFrom "
                       "that succeeded: its report cannot carry one")
    if report.phase not in (*JOB_PHASES, "postdeploy") and not items_may_run(spec, machine):
        raise Conflict(f"kubeconfig: item {item.name} is not in the current assignment of "
                       f"{machine.hostname} (its node is being drained): its report cannot "
                       "carry one")
    return _taken(machine, item, report.kubeconfig, now)


def _taken(machine: Machine, item: StateItem, text: str, now: float) -> tuple[str, list[Event]]:
    """The kubeconfig the machine holds once item's file brought text: text, unless it is
    unusable or an older copy than the one held (each said in an event, never quoting it)."""
    problem = kubeconfig_problem(text)
    if problem is not None:
        return machine.kubeconfig, [event(
            now, machine.cluster, "kubeconfig", f"{machine.hostname}: the kubeconfig item "
            f"{item.name} left in {item.kubeconfig_from} is not usable: {problem}", machine)]
    if text == machine.kubeconfig:
        return machine.kubeconfig, []
    held = expires_sooner(text, machine.kubeconfig)
    if held is not None:
        return machine.kubeconfig, [event(
            now, machine.cluster, "kubeconfig", f"{machine.hostname}: the kubeconfig item "
            f"{item.name} left in {item.kubeconfig_from} has a client certificate that expires "
            f"before the one held ({utc(held.not_after)}): an older copy, kept out", machine,
            {"item": item.name})]
    return text, [event(
        now, machine.cluster, "kubeconfig", f"{machine.hostname} reported a kubeconfig (item "
        f"{item.name}, {item.kubeconfig_from}): drains use the first manager's unless "
        "settings.kubernetes.kubeconfig is set", machine, {"item": item.name})]


def refresh_kubeconfig(spec: ClusterSpec, machine: Machine, name: str, fingerprint: str,
                       text: str, now: float) -> Change:
    """The machine once its agent sent again the file of an applied kubeconfigFrom item, which
    changed on disk (certificates renewed by hand, or by kubeadm): taken as a report of the item
    would be, never an older copy, and never one naming another API server than the one held
    (a refresh renews credentials; moving elsewhere takes the item's run). Conflict unless the
    machine is a manager that is not leaving and applied that item in that version. The change
    is empty when the file is the one held (nothing to write)."""
    item = next((i for i in spec.machine_types.manager if i.name == name
                 and i.fingerprint() == fingerprint and i.kubeconfig_from is not None), None)
    if (item is None or machine.role != "manager" or fingerprint not in machine.applied
            or machine.state is MachineState.DELETING):
        raise Conflict(f"kubeconfig: item {name[:64]} ({fingerprint}) is not a kubeconfigFrom "
                       f"item {machine.hostname} applied in this version: it cannot send its "
                       "file again")
    held, sent = server_of(machine.kubeconfig), server_of(text)
    if machine.kubeconfig and held != sent:  # renewed credentials, never another API server
        return Change(machines=[machine], events=[event(
            now, machine.cluster, "kubeconfig", f"{machine.hostname}: the kubeconfig item "
            f"{item.name} left in {item.kubeconfig_from} changed on disk and names another API "
            f"server ({sent}) than the one held ({held}): kept out; a release that runs the "
            "item again brings it", machine, {"item": item.name})])
    kubeconfig, events = _taken(machine, item, text, now)
    if kubeconfig == machine.kubeconfig and not events:
        return Change()
    return Change(machines=[replace(machine, kubeconfig=kubeconfig)], events=events)


def _post_deploy_check(spec: ClusterSpec, machine: Machine, item: StateItem, report: ItemReport,
                       now: float) -> list[Event]:
    """A post-deploy version check's outcome, as its own event: verified, or which version is
    installed instead of the declared one (the agent retries until they match)."""
    action = item.action
    if not isinstance(action, VersionAction) or report.status == "running":
        return []
    if report.status == "succeeded":
        message = (f"post-deploy step verified on {machine.hostname} at release "
                   f"{spec.release}: {item.name.removesuffix('.version')} {action.expect}")
    else:
        message = (f"post-deploy check {item.name} failed on {machine.hostname} at release "
                   f"{spec.release} (attempt {report.attempt}): {report.error}")
    return [event(now, machine.cluster, "post-deploy", message, machine, {
        "item": item.name, "declared": action.expect, "release": spec.release,
        "verified": report.status == "succeeded",
        "installed": installed_version(report.output) if report.exit_code is not None else None})]


def failing_since(before: ItemProgress | None, report: ItemReport, now: float) -> float | None:
    """When the item began failing: kept while it fails again (retries, or "running" between
    them), cleared by its success or by another item."""
    if report.status == "succeeded" or before is None or before.item != report.item:
        return now if report.status == "failed" else None
    if before.failing_since is not None:
        return before.failing_since
    return now if report.status == "failed" else None


def describe(report: ItemReport, machine: Machine) -> str:
    """An item report in one line of history; a prepare or deploy item that an upgrade runs
    again (it changed) says so, and the last attempt of one the agent gave up on says that
    and what the operator does about it."""
    text = f"{report.phase} item {report.item} {report.status} (attempt {report.attempt})"
    if machine.state is MachineState.UPGRADE and report.phase != "upgrade":
        text += " in the upgrade"
    if report.status == "failed" and report.error:
        text += f": {report.error}"
    if report.gave_up:
        text += f"; {gave_up_text(machine.hostname, report.item, report.attempt, '')}"
    return text
