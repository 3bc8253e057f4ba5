"""`coordinator` command line: `serve`, and admin commands that talk to a running coordinator.

This root holds the group and its global options and hangs each command module's commands on
it. Layers, each importing only those below: this root; the command modules (one per noun);
plumbing.py, formatting.py and console.py; client.py."""

from __future__ import annotations

import click

from coordinator.cli.agents import agents, machines_add
from coordinator.cli.backup import backup
from coordinator.cli.clusters import cluster
from coordinator.cli.completion import completion
from coordinator.cli.events import events
from coordinator.cli.machines import approve, delete, machines, revoke, role
from coordinator.cli.pivot import pivot
from coordinator.cli.plumbing import DEFAULT_URL, make_client, say
from coordinator.cli.process import init, restore, serve, serve_artifacts
from coordinator.cli.status import status
from coordinator.cli.tokens import admin_token, join_token
from coordinator.cli.upgrade import upgrade
from nodeagent.wire import __version__


class RootGroup(click.Group):
    """The root group, whose help ends with every environment variable a command reads (found
    in the options, so that a new one is listed without anyone remembering to)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        read = environment(self, ())
        with formatter.section("Environment"):
            formatter.write_dl([(name, ", ".join(sorted(set(uses)))) for name, uses in read])
        super().format_epilog(ctx, formatter)


def environment(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """Each environment variable an option of command (or of its subcommands) reads, with the
    options that read it, as `[command ]--option`."""
    found: dict[str, list[str]] = {}
    for param in command.params:
        names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
        for name in names:
            found.setdefault(name, []).append(" ".join([*path, param.opts[-1]]))
    for name, sub in getattr(command, "commands", {}).items():
        for variable, uses in environment(sub, (*path, name)):
            found.setdefault(variable, []).extend(uses)
    return sorted(found.items())


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coordinator")
@click.option("--url", envvar="COORDINATOR_URL", show_envvar=True, default=DEFAULT_URL,
              show_default=True, help="Coordinator address.")
@click.option("--token", envvar="COORDINATOR_TOKEN", show_envvar=True, help="Admin token.")
@click.option("--token-file", envvar="COORDINATOR_TOKEN_FILE", show_envvar=True,
              type=click.Path(dir_okay=False),
              help="File holding the admin token, e.g. DATA_DIR/admin.token.")
@click.option("--ca", "ca_file", envvar="COORDINATOR_CA", show_envvar=True,
              type=click.Path(dir_okay=False),
              help="CA certificate to trust for https, e.g. DATA_DIR/pki/ca.crt.")
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
for command in (serve, serve_artifacts, init, cluster, join_token, admin_token, machines, approve,
                role, delete, revoke, status, events, completion, upgrade, agents, backup, restore,
                pivot):
    main.add_command(command)
