"""`coordinator completion SHELL`: the script that makes the shell complete commands and the
names of clusters and machines."""

from __future__ import annotations

import click


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script: eval "$(coordinator completion bash)"."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # click ships all three
    # The root command, so the script completes the whole tree: this module cannot import it.
    script = completer(ctx.find_root().command, {}, "coordinator", "_COORDINATOR_COMPLETE").source()
    click.echo(script)  # noqa: TID251 (a shell script of our own: printed as it is)
