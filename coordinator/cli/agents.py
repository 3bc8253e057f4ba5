"""`coordinator machines add --ssh` and `coordinator agents retarget`: the admin side of
pushing agents onto hosts over SSH (coordinator/ssh/session.py does the work). The root group hangs
`add` under `machines`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from coordinator.cli.client import AdminClient, ClientError
from coordinator.cli.plumbing import EXIT_ERROR, call, say

if TYPE_CHECKING:
    from nodeagent.wire.contract import Role


def ssh_options(command: Any) -> Any:
    """--key, and which host keys to trust: --known-hosts or --host-key."""
    for option in reversed([
        click.option("--key", required=True, type=click.Path(exists=True, dir_okay=False),
                     help="Private key to log in with."),
        click.option("--known-hosts", type=click.Path(dir_okay=False),
                     help="known_hosts file to check host keys against "
                          "(default ~/.ssh/known_hosts)."),
        click.option("--host-key", metavar="'TYPE BASE64'",
                     help="Accept only this host key (as in the host's .pub file)."),
    ]):
        command = option(command)
    return command


def _run_ssh(targets: tuple[str, ...], key: str, known_hosts: str | None,
             host_key: str | None, step: Any) -> None:
    """Run step(session) on each target in turn; exit 1 naming every host that failed."""
    import asyncio

    from coordinator.ssh.session import HostTrust, SshError, SshTarget, session

    if known_hosts and host_key:
        raise click.UsageError("give --known-hosts or --host-key, not both")
    try:
        parsed = [SshTarget.parse(t) for t in targets]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ssh") from None
    trust = HostTrust(Path(known_hosts) if known_hosts else None, host_key)

    async def one(target: SshTarget) -> None:
        async with session(target, Path(key), trust) as ssh:
            await step(ssh)

    failed = []
    for target in parsed:
        try:
            asyncio.run(one(target))
        except SshError as exc:
            say(f"error: {exc}", err=True)
            failed.append(str(target))
    if failed:
        say(f"failed on {len(failed)} of {len(parsed)}: {', '.join(failed)}", err=True)
        sys.exit(EXIT_ERROR)


@click.command("add")
@click.option("--ssh", "target", required=True, metavar="USER@HOST[:PORT]",
              help="Where to install the agent.")
@ssh_options
@click.option("--cluster", "cluster_name", help="Create a join token for this cluster.")
@click.option("--join", "join_string", help="Use this join string instead of creating a token.")
@click.option("--role", type=click.Choice(["manager", "worker"]),
              help="Role the agent checks minimums for.")
@click.option("--packages", "packages_dir", envvar="COORDINATOR_AGENT_PACKAGES", show_envvar=True,
              default="dist", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Directory with the nodeagent .deb and .rpm.")
@click.pass_context
def machines_add(ctx: click.Context, target: str, key: str, known_hosts: str | None,
                 host_key: str | None, cluster_name: str | None, join_string: str | None,
                 role: str | None, packages_dir: str) -> None:
    """Install the agent on a host over SSH: detect its OS, copy and install the matching
    package, write its config with a join string, enable and start the service.

    With --cluster, the join token made for it is good for one registration within an hour.
    """
    from coordinator.ssh.session import install_agent
    from nodeagent.wire.joinstring import BadJoinString, decode

    if bool(cluster_name) == bool(join_string):
        raise click.UsageError("give --cluster (to create a join token) or --join")
    if join_string:
        try:
            decode(join_string)
        except BadJoinString as exc:
            raise click.BadParameter(str(exc), param_hint="--join") from None
    else:
        join_string = call(ctx, "POST", f"/v1/clusters/{cluster_name}/join-tokens",
                            body={"ttl": "1h", "maxUses": 1})["join"]
    _run_ssh((target,), key, known_hosts, host_key, lambda ssh: install_agent(
        ssh, Path(packages_dir), join_string, cast("Role | None", role), say))


@click.group()
def agents() -> None:
    """Act on installed agents over SSH."""


@agents.command("retarget")
@click.option("--url", "new_url", required=True, help="The coordinator the agents move to.")
@click.option("--ssh", "targets", required=True, multiple=True, metavar="USER@HOST[:PORT]",
              help="A host whose agent moves (repeat for more).")
@ssh_options
@click.pass_context
def agents_retarget(ctx: click.Context, new_url: str, targets: tuple[str, ...], key: str,
                    known_hosts: str | None, host_key: str | None) -> None:
    """Move agents to another coordinator that carries this one's data and CA (a copy of
    its data directory, pki/ included): set coordinator.url in their config, restart them."""
    from pydantic import ValidationError

    from coordinator.ssh.session import retarget_agent
    from nodeagent.wire.config import CoordinatorConfig

    try:
        CoordinatorConfig(url=new_url)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise click.BadParameter(f"{new_url}: {message}", param_hint="--url") from None
    try:  # with the CA given to `coordinator --ca`, which the agents' kept CA must match
        AdminClient(new_url, None, timeout=10, ca_file=ctx.find_root().params["ca_file"]
                    ).get("/healthz")
    except ClientError as exc:
        say(f"error: the new coordinator does not answer, no agent moved: {exc}",
                   err=True)
        sys.exit(EXIT_ERROR)
    _run_ssh(targets, key, known_hosts, host_key,
             lambda ssh: retarget_agent(ssh, new_url, say))
