"""`coordinator status`: one cluster's stages, rollout and machines, once or redrawn live."""

from __future__ import annotations

import time

import click

from coordinator.cli.client import AdminClient, ClientError
from coordinator.cli.plumbing import (
    call,
    complete_clusters,
    emit,
    emit_record,
    interrupt_quietly,
    output_option,
    say,
)
from coordinator.cli.render import moved_line


@click.command()
@click.argument("cluster_name", shell_complete=complete_clusters)
@click.option("--watch", "-w", is_flag=True,
              help="Redraw live, with progress bars and an ETA, until interrupted.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between refreshes.")
@output_option
@click.pass_context
def status(ctx: click.Context, cluster_name: str, watch: bool, interval: float,
           output: str) -> None:
    """The cluster's stages, the rollout's progress and each machine's step."""
    path = f"/v1/clusters/{cluster_name}/status"
    data = call(ctx, "GET", path)
    if data.get("moved") and output == "table":
        say(moved_line(data["moved"]))
    if output != "table":
        if not watch:
            emit(data, output)
            return
        with interrupt_quietly():
            while True:
                emit_record(data, output)
                time.sleep(interval)
                data = call(ctx, "GET", path)
    from rich.console import Group
    from rich.live import Live

    from coordinator.cli.console import cell, status_console, status_renderable

    console = status_console()
    if not watch:
        console.print(status_renderable(data))
        return
    client: AdminClient = ctx.obj
    with interrupt_quietly(), Live(status_renderable(data), console=console,
                                   auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            try:
                data = client.get(path)
                live.update(status_renderable(data), refresh=True)
            except ClientError as exc:  # keep the last picture; say why it is stale
                live.update(Group(status_renderable(data), cell(""),
                                  cell(f"{exc}: retrying", "bold red")), refresh=True)
