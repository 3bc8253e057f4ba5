"""`coordinator machines [get|logs]` and the commands that act on one machine: approve, role,
delete, revoke. (`machines add`, which works over SSH, lives with the other SSH commands.)"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import click

from coordinator.cli.plumbing import (
    call,
    complete_clusters,
    complete_machines,
    emit,
    emit_record,
    event_history,
    follow_events,
    interrupt_quietly,
    output_option,
)
from coordinator.cli.render import clock, duration, item_header, machines_table


@click.group(invoke_without_command=True)
@click.option("--cluster", "cluster_name", help="Only this cluster's machines.",
              shell_complete=complete_clusters)
@output_option
@click.pass_context
def machines(ctx: click.Context, cluster_name: str | None, output: str) -> None:
    """List machines with their state and item progress (or: machines get|logs|add)."""
    if ctx.invoked_subcommand is not None:
        return
    path = "/v1/machines" + (f"?{urlencode({'cluster': cluster_name})}" if cluster_name else "")
    data = call(ctx, "GET", path)
    if not emit(data, output):
        click.echo(machines_table(data))


@machines.command("get")
@click.argument("machine", shell_complete=complete_machines)
@output_option
@click.pass_context
def machines_get(ctx: click.Context, machine: str, output: str) -> None:
    """One machine in full: state, step, facts, precheck report."""
    data = call(ctx, "GET", f"/v1/machines/{machine}")
    if emit(data, output):
        return
    click.echo(machines_table([data]))
    click.echo(f"\nid {data['id']}  cluster {data['cluster']}  in {data['state']} for "
               f"{duration(data['step']['state_elapsed'])}  last seen {clock(data['last_seen'])}")


def print_item(event: dict[str, Any], output: str) -> None:
    """An item report as a log: a header line, then the output the agent sent."""
    if output != "table":
        emit_record(event, output)
        return
    click.echo(item_header(event))
    text = event["data"].get("output")
    if text:
        click.echo(text, nl=not text.endswith("\n"))


@machines.command("logs")
@click.argument("machine", shell_complete=complete_machines)
@click.option("--follow", "-f", is_flag=True, help="Keep printing output as items report it.")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N item reports.")
@output_option
@click.pass_context
def machines_logs(ctx: click.Context, machine: str, follow: bool, tail: int | None,
                  output: str) -> None:
    """The output of a machine's items (the last 4 KiB of each attempt, as reported)."""
    found = call(ctx, "GET", f"/v1/machines/{machine}")
    query = {"machine": found["id"], "kind": "item"}
    after = 0
    for event in event_history(ctx, query, tail):
        print_item(event, output)
        after = event["id"]
    if follow:
        if after == 0:
            after = max((e["id"] for e in call(ctx, "GET", "/v1/events?order=desc&limit=1")),
                        default=0)
        with interrupt_quietly():
            follow_events(ctx, query, after, lambda event: print_item(event, output))


@click.command()
@click.argument("machine", shell_complete=complete_machines)
@click.option("--role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def approve(ctx: click.Context, machine: str, role: str | None) -> None:
    """Approve a Pending machine (by hostname or id), optionally giving its role."""
    body = {"role": role} if role else {}
    data = call(ctx, "POST", f"/v1/machines/{machine}/approve", body=body)
    click.echo(f"{data['hostname']} approved" + (f" as {data['role']}" if data["role"] else ""))


@click.command()
@click.argument("machine", shell_complete=complete_machines)
@click.argument("role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def role(ctx: click.Context, machine: str, role: str) -> None:
    """Set the role of a Pending machine."""
    data = call(ctx, "PUT", f"/v1/machines/{machine}/role", body={"role": role})
    click.echo(f"{data['hostname']} is a {data['role']}")


@click.command()
@click.argument("machine", shell_complete=complete_machines)
@click.option("--force", is_flag=True, help="Remove at once, without running reset items.")
@click.pass_context
def delete(ctx: click.Context, machine: str, force: bool) -> None:
    """Delete a machine: its agent runs the cluster's reset items, then it is removed."""
    data = call(ctx, "DELETE", f"/v1/machines/{machine}" + ("?force=true" if force else ""))
    click.echo(f"{machine}: {data['status']}")


@click.command()
@click.argument("machine", shell_complete=complete_machines)
@click.pass_context
def revoke(ctx: click.Context, machine: str) -> None:
    """Revoke a machine's credential: its agent is refused until the machine joins anew."""
    data = call(ctx, "POST", f"/v1/machines/{machine}/revoke")
    click.echo(f"{data['hostname']}: credential revoked")
