"""`nodeagent` command line. Heavy modules are imported inside commands to keep start-up fast."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

from nodeagent import __version__

if TYPE_CHECKING:
    from nodeagent.prechecks.base import CheckContext
    from nodeagent.wire.config import AgentConfig
    from nodeagent.wire.contract import Role

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_REMOVED = 3  # `run`: the machine was deleted; systemd leaves it stopped (see the unit)

_config_option = click.option(
    "--config", "config_path", default="/etc/nodeagent/config.yaml", show_default=True,
    type=click.Path(dir_okay=False), help="Agent config file.")
_root_option = click.option(
    "--root", default="/", show_default=True, type=click.Path(file_okay=False),
    help="Machine root: prechecks read and file items write under it.")
_log_level_option = click.option(
    "--log-level", default="info", show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]))


def _split_ignores(values: tuple[str, ...]) -> list[str]:
    return [name for value in values for name in value.split(",")]


def _ntp_servers(ctx: click.Context, param: click.Parameter,
                 values: tuple[str, ...]) -> tuple[str, ...]:
    from nodeagent.wire.protocol import split_host_port

    for value in values:
        try:
            split_host_port(value, 123)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return values


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeagent")
def main() -> None:
    """Node agent: checks a machine, joins it to a cluster and applies its StateItems."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Agent config file (coordinator URL, NTP servers, thresholds, proxy). "
                   "Default: /etc/nodeagent/config.yaml when it exists.")
@click.option("--root", default="/", show_default=True, type=click.Path(file_okay=False),
              help="Read the machine's files under this directory instead of /.")
@click.option("--role", type=click.Choice(["manager", "worker"]),
              help="Role to check minimums for (default: the config's role, else worker).")
@click.option("--ignore", "ignores", multiple=True, metavar="NAME[,NAME]|all",
              help="Turn these checks' failures into warnings.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--ntp-server", "ntp_servers", multiple=True, callback=_ntp_servers,
              metavar="HOST[:PORT]", help="Check the clock against these servers instead of the "
              "config's ntp.servers (the agent passes its cluster's when the config has none).")
@click.option("--max-skew-seconds", type=click.FloatRange(min=0, min_open=True),
              help="Clock offset that fails the check, instead of the config's ntp.maxSkewSeconds.")
@click.option("--prepared", is_flag=True,
              help="The cluster's prepare items ran: the Kubernetes prerequisites they set "
                   "(forwarding, bridge netfilter, swap, the runtime) must hold now; without "
                   "it their failures are reported as to be set by Prepare.")
def precheck(config_path: str | None, root: str, role: str | None, ignores: tuple[str, ...],
             output: str, ntp_servers: tuple[str, ...], max_skew_seconds: float | None,
             prepared: bool) -> None:
    """Check whether this machine can join a cluster, and what to fix.

    Exits 0 when no hard check failed, 1 when one did, 2 on bad usage or config.
    """
    from nodeagent.prechecks import CHECKS, NAMES
    from nodeagent.prechecks.runner import resolve_ignores, run_checks

    config = _load_config(config_path, root)
    ntp = {"servers": list(ntp_servers)} if ntp_servers else {}
    if max_skew_seconds is not None:
        ntp["max_skew_seconds"] = max_skew_seconds
    config = config.model_copy(update={"ntp": config.ntp.model_copy(update=ntp)})
    try:
        ignored = resolve_ignores(_split_ignores(ignores), NAMES)
    except ValueError as exc:
        raise click.BadOptionUsage("ignore", f"--ignore: {exc}") from None
    ctx = _context(root, config, role or config.role)
    report = asyncio.run(run_checks(CHECKS, ctx, ignored, prepared))
    if output == "json":
        click.echo(report.to_json())
    else:
        from nodeagent.prechecktable import precheck_table

        click.echo(precheck_table(report))
    sys.exit(EXIT_OK if report.ok else EXIT_CHECK_FAILED)


@main.command()
@click.option("--root", default="/", show_default=True, type=click.Path(file_okay=False),
              help="Read the machine's files under this directory instead of /.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def facts(root: str, output: str) -> None:
    """Print what this node reports about itself: hostname, primary IP, interfaces, hardware, OS."""
    from nodeagent.facts import collect
    from nodeagent.host import Host

    found = collect(Host(root))
    if output == "json":
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"hostname:    {found['hostname']}")
    click.echo(f"primary ip:  {found['primary_ip'] or '(none)'}"
               f" via {found['default_interface'] or '(no default route)'}")
    click.echo(f"os:          {found['os']['pretty_name']} (kernel {found['os']['kernel']})")
    click.echo(f"cpu:         {found['cpu']['logical']} logical, {found['cpu']['physical']} physical")
    click.echo(f"memory:      {found['memory']['total_bytes'] // 2**20} MiB")
    click.echo("interfaces:")
    for iface in found["interfaces"]:
        addrs = ", ".join(f"{a['address']}/{a['prefixlen']}" for a in iface["addresses"])
        click.echo(f"  {iface['name']:<12} {iface['state'] or '':<8} {addrs}")
    click.echo("disks:")
    for disk in found["disks"]:
        click.echo(f"  {disk['mountpoint']:<20} {disk['fstype']:<8} "
                   f"{disk['free_bytes'] / 2**30:.1f} of {disk['total_bytes'] / 2**30:.1f} GiB free")
    click.echo("block devices:")
    for device in found["block_devices"]:
        use = "in use: " + ", ".join(device["mounts"] + device["holders"]) if device["in_use"] \
            else "unused"
        click.echo(f"  /dev/{device['name']:<12} {(device['size_bytes'] or 0) / 2**30:.1f} GiB"
                   f"  {device['model'] or ''}  {use}")


@main.command()
def version() -> None:
    """Print the agent version."""
    click.echo(__version__)


@main.command("check-config")
@_config_option
@click.option("--quiet", "-q", is_flag=True, help="Only the exit status.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: when ready, the config as `nodeagent run` takes it (defaults filled "
                   "in, the join string decoded) on stdout; else the message on stderr.")
def check_config(config_path: str, quiet: bool, output: str) -> None:
    """Whether `nodeagent run` can start with this config: it names a coordinator and either
    a join token or an identity from an earlier registration.

    Exits 0 when ready, 1 when not configured yet, 2 when the file is invalid. The package's
    post-install script starts the service only on 0, and `nodeagent run` itself starts only
    on 0 (it reads its config this way, in a child, to stay small).
    """
    from nodeagent.identity import IDENTITY_FILE, load_identity

    missing = []
    config = None
    if Path(config_path).exists():
        config = _load_config(config_path)
        if not config.coordinator.url:
            missing.append("coordinator.url (or join)")
        if not config.join_token and load_identity(Path(config.state_dir) / IDENTITY_FILE) is None:
            missing.append("joinToken (or join), as the machine is not registered yet")
    else:
        missing.append("the config file itself")
    message = (f"{config_path}: not configured yet: missing " + "; ".join(missing) if missing
               else f"{config_path}: ready")
    if output == "json" and config is not None and not missing:
        click.echo(json.dumps(_as_run_takes_it(config)))
    elif not quiet:
        click.echo(message, err=output == "json")
    sys.exit(EXIT_CHECK_FAILED if missing else EXIT_OK)


def _as_run_takes_it(config: AgentConfig) -> dict[str, object]:
    """The document the daemon's DaemonSettings (nodeagent/children.py) is read from."""
    from nodeagent.proxy import coordinator_endpoints

    return {"config": config.model_dump(mode="json"), "ca_hash": config.ca_hash,
            "coordinator_endpoints": [
                dataclasses.asdict(endpoint) for endpoint in coordinator_endpoints(
                    config.coordinator.all_urls, config.proxy, os.environ)]}


def _load_config(path: str | None, root: str = "/") -> AgentConfig:
    """The given config file; else the machine's default one (under root) when it exists."""
    from nodeagent.host import Host
    from nodeagent.wire.config import DEFAULT_CONFIG_PATH, load_config
    from nodeagent.wire.validation import InvalidDocument

    default = Host(root).path(DEFAULT_CONFIG_PATH)
    if path is None and default.exists():
        path = str(default)
    try:
        return load_config(path)
    except InvalidDocument as exc:
        click.echo(f"error: bad config file\n{exc}", err=True)
        sys.exit(EXIT_USAGE)


def _context(root: str, config: AgentConfig, role: str) -> CheckContext:
    from nodeagent.host import Host
    from nodeagent.prechecks.base import CheckContext

    return CheckContext(Host(root), config, cast("Role", role))


@main.command()
@_config_option
@_root_option
@_log_level_option
def run(config_path: str, root: str, log_level: str) -> None:
    """Run the agent: precheck, register, wait for approval, apply assigned items, report.

    Exits 1 on an error retrying cannot fix, 2 on a bad config, 3 once its machine was deleted
    from the cluster (started again, it registers a new machine).
    """
    from nodeagent.children import AgentError, BadConfig
    from nodeagent.daemon import MachineRemoved, run_agent
    from nodeagent.host import Host
    from nodeagent.wire import logfmt

    logfmt.configure(log_level)
    try:
        asyncio.run(run_agent(config_path, Host(root)))
    except BadConfig as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_USAGE)
    except MachineRemoved:  # the agent logged why
        sys.exit(EXIT_REMOVED)
    except AgentError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CHECK_FAILED)
    except KeyboardInterrupt:
        pass


@main.command(hidden=True)
@_config_option
@_root_option
@_log_level_option
def apply(config_path: str, root: str, log_level: str) -> None:
    """Apply one assignment's phase, for `nodeagent run`: the Assignment as a JSON line on
    stdin (a pipe), each ItemReport as a JSON line on stdout. Closing stdin stops it.

    Exits 0 when every item is applied, 3 when one failed retry.maxAttempts times, 4 when
    stopped, 2 on a bad config, assignment or journal.
    """
    from nodeagent.phase import apply_from_stdin
    from nodeagent.wire import logfmt

    logfmt.configure(log_level)
    config = _load_config(config_path)
    sys.exit(asyncio.run(apply_from_stdin(config, Path(root))))
