"""`coordinator status`: one cluster's stages, rollout and machines, once or redrawn live."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import click

from coordinator.cli.client import AdminClient, ClientError
from coordinator.cli.formatting import moved_line
from coordinator.cli.plumbing import (
    call,
    complete_clusters,
    emit,
    emit_record,
    fail,
    interrupt_quietly,
    output_option,
    say,
)

SHOWN = 100  # machines the table shows


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
    """The cluster's stages, the rollout's progress and each machine's step (in the table, the
    first 100 machines: `coordinator machines --cluster NAME` pages through them all)."""
    if output != "table":  # the whole status, every machine's view in it
        path = f"/v1/clusters/{quote(cluster_name, safe='')}/status"
        data = call(ctx, "GET", path)
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

    client: AdminClient = ctx.obj
    try:
        data = picture(client, cluster_name)
    except ClientError as exc:
        fail(exc)
    if data.get("moved"):
        say(moved_line(data["moved"]))
    console = status_console()
    if not watch:
        console.print(status_renderable(data))
        return
    with interrupt_quietly(), Live(status_renderable(data), console=console,
                                   auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            try:
                data = picture(client, cluster_name)
                live.update(status_renderable(data), refresh=True)
            except ClientError as exc:  # keep the last picture; say why it is stale
                live.update(Group(status_renderable(data), cell(""),
                                  cell(f"{exc}: retrying", "bold red")), refresh=True)


def picture(client: AdminClient, cluster_name: str) -> dict[str, Any]:
    """What the table shows: the status without machines and the first page of them, so that
    a redraw costs the coordinator the same at 10,000 machines as at ten."""
    name = quote(cluster_name, safe="")
    data = client.get(f"/v1/clusters/{name}/status?machines=false")
    page = client.get(f"/v1/machines?cluster={name}&limit={SHOWN}")
    return {**data, "machines": page["machines"], "machines_total": page["total"]}
