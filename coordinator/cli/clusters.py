"""`coordinator cluster apply|get|delete`: declaring clusters and reading them back."""

from __future__ import annotations

from typing import Any

import click

from coordinator.cli.plumbing import call, complete_clusters, echo_lines, emit, output_option
from coordinator.cli.render import clusters_lines


@click.group()
def cluster() -> None:
    """Declare and inspect clusters."""


@cluster.command("apply")
@click.option("-f", "--file", "path", required=True, type=click.File("r"),
              help="Cluster spec (YAML or JSON); - for stdin.")
@click.pass_context
def cluster_apply(ctx: click.Context, path: Any) -> None:
    """Create or update a cluster. Nothing is stored when the spec has any problem."""
    text = path.read()
    result = call(ctx, "PUT", "/v1/clusters", text=text, content_type="application/yaml")
    verb = "changed" if result["changed"] else "unchanged"
    click.echo(f"cluster {result['name']} {verb}: release {result['release']}, "
               f"generation {result['generation']}")


@cluster.command("get")
@click.argument("name", required=False, shell_complete=complete_clusters)
@output_option
@click.pass_context
def cluster_get(ctx: click.Context, name: str | None, output: str) -> None:
    """Show one cluster, or list them all."""
    data = call(ctx, "GET", f"/v1/clusters/{name}" if name else "/v1/clusters")
    if not emit(data, output):
        echo_lines(clusters_lines(data if isinstance(data, list) else [data]))


@cluster.command("delete")
@click.argument("name", shell_complete=complete_clusters)
@click.pass_context
def cluster_delete(ctx: click.Context, name: str) -> None:
    """Reset every machine of the cluster, then remove it."""
    call(ctx, "DELETE", f"/v1/clusters/{name}")
    click.echo(f"cluster {name}: machines are resetting; it goes when they are done")
