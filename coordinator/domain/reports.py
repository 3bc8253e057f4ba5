"""Folding an agent's item report into its machine: pure, so every rule of what a report may
carry and what it changes is tested without a store or a server."""

from __future__ import annotations

from dataclasses import dataclass, replace

from coordinator.domain.assignment import assigned_phase
from coordinator.domain.errors import Conflict
from coordinator.domain.events import event
from coordinator.domain.kubeconfig import kubeconfig_problem
from coordinator.domain.minting import job_items
from coordinator.domain.model import (
    ClusterSpec,
    ItemProgress,
    Machine,
    MachineState,
    MintJob,
    applies,
    phase_items,
)
from coordinator.domain.outputs import key
from coordinator.domain.records import Event
from coordinator.domain.releases import upgrade_run
from nodeagent.contract import JOB_PHASES, ROLES
from nodeagent.protocol import ItemReport, StateItem, VersionAction, installed_version
from nodeagent.redact import mask_values


@dataclass(frozen=True)
class Folded:
    """A machine once a report is in, and the events that say what happened."""

    machine: Machine
    events: list[Event]


def reportable_items(spec: ClusterSpec, managers: tuple[str, ...]) -> dict[str, StateItem]:
    """Every item a report may name, by fingerprint: the spec's items of every phase, with the
    reconfigure items as rendered for the deployed managers and the post-deploy checks."""
    return {i.fingerprint(): i for role in ROLES
            for i in [*getattr(spec.machine_types, role),
                      *phase_items(spec, role, "reconfigure", managers),
                      *phase_items(spec, role, "postdeploy")]}


def fold_report(spec: ClusterSpec, items: dict[str, StateItem], machine: Machine,
                report: ItemReport, now: float) -> Folded:
    """The machine once `report` is in. Raises Conflict for a report that does not fit: an
    item the spec does not have, or a kubeconfig from an item that may not send one."""
    job = report.phase in JOB_PHASES
    if job:  # a mint or revoke job's item: its run is versioned by the job (minting.job_items)
        items = {i.fingerprint(): i for i in
                 (job_items(spec, machine.minting) if machine.minting is not None else [])}
    item = items.get(report.fingerprint)
    if item is None:
        raise Conflict(f"item {report.item} ({report.fingerprint}) is not in the cluster spec"
                       + (" or not a job this manager runs now" if job else ""))
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
        minting=_job_done(machine.minting, item, produced) if job and succeeded
        else machine.minting,
        progress=ItemProgress(item=report.item, attempt=report.attempt, status=report.status,
                              error=report.error, next_retry_at=report.next_retry_at,
                              updated_at=now,
                              failing_since=failing_since(machine.progress, report, now)),
    )
    reported = event(now, machine.cluster, "item", describe(report, machine.state), updated, {
        "item": report.item, "phase": report.phase, "state": machine.state.value,
        "status": report.status,
        "attempt": report.attempt, "exit_code": report.exit_code,
        "duration": (report.finished_at - report.started_at) if report.finished_at else None,
        "error": report.error, "output": report.output,
    })
    return Folded(updated, [reported, *kubeconfig_events,
                            *_post_deploy_check(spec, updated, item, report, now)])


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
    machine runs it."""
    if report.kubeconfig is None:
        return machine.kubeconfig, []
    if item.kubeconfig_from is None or machine.role != "manager" or report.status != "succeeded":
        raise Conflict(f"kubeconfig: item {item.name} is not a manager item with kubeconfigFrom "
                       "that succeeded: its report cannot carry one")
    if not _runs_now(spec, machine, item, report):
        raise Conflict(f"kubeconfig: item {item.name} ({report.phase}) is not in the current "
                       f"assignment of {machine.hostname} ({machine.state.value}): its report "
                       "cannot carry one")
    problem = kubeconfig_problem(report.kubeconfig)
    if problem is not None:
        return machine.kubeconfig, [event(
            now, machine.cluster, "kubeconfig", f"{machine.hostname}: the kubeconfig item "
            f"{item.name} left in {item.kubeconfig_from} is not usable: {problem}", machine)]
    if report.kubeconfig == machine.kubeconfig:
        return machine.kubeconfig, []
    return report.kubeconfig, [event(
        now, machine.cluster, "kubeconfig", f"{machine.hostname} reported a kubeconfig (item "
        f"{item.name}, {item.kubeconfig_from}): drains use the first manager's unless "
        "settings.kubernetes.kubeconfig is set", machine, {"item": item.name})]


def _runs_now(spec: ClusterSpec, machine: Machine, item: StateItem, report: ItemReport) -> bool:
    """Whether the report is of an item the machine's current assignment holds, under the
    item's own phase: a manager in Prepare cannot report its deploy item. Which manager hosts
    the post-deploy step is not known here: any Ready manager's post-deploy items count."""
    phase = assigned_phase(spec, machine, post_deploy_host=machine.id)
    if phase is None or report.phase != item.phase:
        return False
    if phase == "upgrade":  # an upgrade runs changed prepare and deploy items too
        return report.fingerprint in {f for _, f in upgrade_run(spec, machine)}
    return item.phase == phase and (phase in JOB_PHASES or applies(item, machine))


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


def describe(report: ItemReport, state: MachineState) -> str:
    """An item report in one line of history; a prepare or deploy item that an upgrade runs
    again (it changed) says so."""
    text = f"{report.phase} item {report.item} {report.status} (attempt {report.attempt})"
    if state is MachineState.UPGRADE and report.phase != "upgrade":
        text += " in the upgrade"
    if report.status == "failed" and report.error:
        text += f": {report.error}"
    return text
