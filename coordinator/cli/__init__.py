"""`coordinator` command line: `serve`, and admin commands that talk to a running coordinator.

This root holds the group and its global options and hangs each command module's commands on
it. Layers, each importing only those below: this root; the command modules (one per noun);
plumbing.py, render.py and console.py; client.py."""

from __future__ import annotations

import click

from coordinator.cli.agents import agents, machines_add
from coordinator.cli.clusters import cluster
from coordinator.cli.completion import completion
from coordinator.cli.events import events
from coordinator.cli.machines import approve, delete, machines, revoke, role
from coordinator.cli.plumbing import DEFAULT_URL, make_client, say
from coordinator.cli.process import init, serve
from coordinator.cli.status import status
from coordinator.cli.tokens import admin_token, join_token
from coordinator.cli.upgrade import upgrade
from nodeagent import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coordinator")
@click.option("--url", envvar="COORDINATOR_URL", default=DEFAULT_URL,
              show_default=True, help="Coordinator address (env COORDINATOR_URL).")
@click.option("--token", envvar="COORDINATOR_TOKEN", help="Admin token (env COORDINATOR_TOKEN).")
@click.option("--token-file", envvar="COORDINATOR_TOKEN_FILE", type=click.Path(dir_okay=False),
              help="File holding the admin token, e.g. DATA_DIR/admin.token.")
@click.option("--ca", "ca_file", envvar="COORDINATOR_CA", type=click.Path(dir_okay=False),
              help="CA certificate to trust for https, e.g. DATA_DIR/pki/ca.crt "
                   "(env COORDINATOR_CA).")
@click.pass_context
def main(ctx: click.Context, url: str, token: str | None, token_file: str | None,
         ca_file: str | None) -> None:
    """Coordinator: holds clusters and machines and orders their rollout.

    Shell completion: eval "$(coordinator completion bash)" (or zsh, fish)."""
    ctx.obj = make_client(url, token, token_file, ca_file)


@main.command()
def version() -> None:
    """Print the coordinator version."""
    say(__version__)


machines.add_command(machines_add)
machines.add_command(approve)  # `coordinator machines approve` too, beside `coordinator approve`
for command in (serve, init, cluster, join_token, admin_token, machines, approve, role, delete,
                revoke, status, events, completion, upgrade, agents):
    main.add_command(command)
