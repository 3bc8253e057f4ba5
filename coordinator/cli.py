"""`coordinator` command line."""

from __future__ import annotations

import click

from nodeagent import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coordinator")
def main() -> None:
    """Coordinator: holds clusters and machines and orders their rollout."""


@main.command()
def version() -> None:
    """Print the coordinator version."""
    click.echo(__version__)
