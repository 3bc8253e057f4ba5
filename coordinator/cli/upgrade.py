"""`coordinator upgrade ...`: the dry-run plan, pausing and resuming, and acting on a machine
whose drain is stuck (an upgrade's, or a removal's)."""

from __future__ import annotations

from typing import Any

import click

from coordinator.cli.formatting import upgrade_plan_lines
from coordinator.cli.plumbing import (
    MachineRef,
    allow_downgrade_option,
    call,
    downgrade_query,
    echo_lines,
    emit,
    machine_argument,
    output_option,
    say,
)


@click.group()
def upgrade() -> None:
    """Upgrades: the dry-run plan, pause and resume, and each machine's drain."""


@upgrade.command("plan")
@click.argument("cluster_name")
@click.option("-f", "--file", "path", type=click.File("r"),
              help="A new cluster spec: the plan its apply would start (default: the stored one).")
@allow_downgrade_option
@output_option
@click.pass_context
def upgrade_plan(ctx: click.Context, cluster_name: str, path: Any, allow_downgrade: bool,
                 output: str) -> None:
    """Show the order and batches the upgrade will take, the items each machine runs and
    what each drain would meet now (the pods it evicts, the budgets and pods that block or
    slow it, with a remedy each), before anything runs. A Kubernetes version its apply would
    refuse is refused alike."""
    where = f"/v1/clusters/{cluster_name}/upgrade-plan" + downgrade_query(allow_downgrade)
    data = (call(ctx, "POST", where, text=path.read(), content_type="application/yaml") if path
            else call(ctx, "GET", where))
    if not emit(data, output):
        echo_lines(upgrade_plan_lines(data))


def _pause_command(verb: str, help_text: str) -> None:
    @upgrade.command(verb, help=help_text)
    @click.argument("cluster_name")
    @click.pass_context
    def command(ctx: click.Context, cluster_name: str) -> None:
        call(ctx, "POST", f"/v1/clusters/{cluster_name}/upgrade/{verb}")
        say(f"cluster {cluster_name}: upgrade {verb}d")


_pause_command("pause", "No machine starts upgrading; those upgrading finish.")
_pause_command("resume", "Let the upgrade go on.")


def _drain_command(action: str, help_text: str) -> None:
    @upgrade.command(action, help=help_text)
    @machine_argument
    @click.pass_context
    def command(ctx: click.Context, machine: MachineRef) -> None:
        data = call(ctx, "POST", machine.path(f"/drain/{action}"))
        say(f"{data['hostname']}: drain {data['drain']['stage']} "
                   f"(attempt {data['drain']['attempt']})")


_drain_command("retry", "Drain the machine's node again, with a new timeout.")
_drain_command("skip", "Upgrade (or reset, when it is being deleted) the machine with the "
               "pods its drain could not move.")
_drain_command("force", "Drain again, deleting the pods budgets protect (bypassing them).")
