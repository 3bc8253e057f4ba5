"""`coordinator` command line: `serve`, and admin commands that talk to a running coordinator."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from coordinator.client import AdminClient, ClientError
from nodeagent import __version__

EXIT_ERROR, EXIT_USAGE = 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coordinator")
@click.option("--url", envvar="COORDINATOR_URL", default="http://127.0.0.1:8080", show_default=True,
              help="Coordinator address (env COORDINATOR_URL).")
@click.option("--token", envvar="COORDINATOR_TOKEN", help="Admin token (env COORDINATOR_TOKEN).")
@click.option("--token-file", envvar="COORDINATOR_TOKEN_FILE", type=click.Path(dir_okay=False),
              help="File holding the admin token, e.g. DATA_DIR/admin.token.")
@click.pass_context
def main(ctx: click.Context, url: str, token: str | None, token_file: str | None) -> None:
    """Coordinator: holds clusters and machines and orders their rollout."""
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc.strerror}",
                                     param_hint="--token-file") from None
    ctx.obj = AdminClient(url, token)


def _call(ctx: click.Context, method: str, path: str, **kwargs: Any) -> Any:
    client: AdminClient = ctx.obj
    try:
        return client.request(method, path, **kwargs)
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        for problem in exc.problems:
            line = f"line {problem['line']}: " if problem.get("line") else ""
            path_text = f"{problem['path']}: " if problem.get("path") else ""
            click.echo(f"  {line}{path_text}{problem['message']}", err=True)
        sys.exit(EXIT_USAGE if exc.status in (400, 422) else EXIT_ERROR)


def _emit(data: Any, output: str) -> bool:
    """Print data as JSON when asked; returns whether it did."""
    if output == "json":
        click.echo(json.dumps(data, indent=2))
        return True
    return False


output_option = click.option("--output", "-o", type=click.Choice(["table", "json"]),
                             default="table", show_default=True)


@main.command()
@click.option("--data-dir", default="coordinator-data", show_default=True,
              type=click.Path(file_okay=False), help="SQLite database, admin token, artifacts.")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT")
@click.option("--artifacts", type=click.Path(file_okay=False),
              help="Artifact store directory (default DATA_DIR/artifacts).")
def serve(data_dir: str, listen: str, artifacts: str | None) -> None:
    """Run the coordinator: HTTP API plus the reconcile loop, on the embedded SQLite store."""
    from coordinator.server import serve_forever

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("expected HOST:PORT", param_hint="--listen")
    serve_forever(Path(data_dir), host.strip("[]"), int(port),
                  Path(artifacts) if artifacts else None)


@main.group()
def cluster() -> None:
    """Declare and inspect clusters."""


@cluster.command("apply")
@click.option("-f", "--file", "path", required=True, type=click.File("r"),
              help="Cluster spec (YAML or JSON); - for stdin.")
@click.pass_context
def cluster_apply(ctx: click.Context, path: Any) -> None:
    """Create or update a cluster. Nothing is stored when the spec has any problem."""
    text = path.read()
    result = _call(ctx, "PUT", "/v1/clusters", text=text, content_type="application/yaml")
    verb = "changed" if result["changed"] else "unchanged"
    click.echo(f"cluster {result['name']} {verb}: release {result['release']}, "
               f"generation {result['generation']}")


@cluster.command("get")
@click.argument("name", required=False)
@output_option
@click.pass_context
def cluster_get(ctx: click.Context, name: str | None, output: str) -> None:
    """Show one cluster, or list them all."""
    data = _call(ctx, "GET", f"/v1/clusters/{name}" if name else "/v1/clusters")
    if _emit(data, output):
        return
    for item in data if isinstance(data, list) else [data]:
        flag = " (deleting)" if item["deleting"] else ""
        click.echo(f"{item['name']:<24} release {item['release']:<12} "
                   f"generation {item['generation']}{flag}")


@cluster.command("delete")
@click.argument("name")
@click.pass_context
def cluster_delete(ctx: click.Context, name: str) -> None:
    """Reset every machine of the cluster, then remove it."""
    _call(ctx, "DELETE", f"/v1/clusters/{name}")
    click.echo(f"cluster {name}: machines are resetting; it goes when they are done")


@main.group("join-token")
def join_token() -> None:
    """Join tokens let agents register into a cluster."""


@join_token.command("create")
@click.argument("cluster_name")
@click.pass_context
@click.option("--join-string", "as_join_string", is_flag=True,
              help="Print a join string instead: the token with the coordinator's URL.")
@click.option("--agent-url", help="URL agents reach the coordinator at (default: --url).")
def join_token_create(ctx: click.Context, cluster_name: str, as_join_string: bool,
                      agent_url: str | None) -> None:
    """Create a join token (shown once; the coordinator keeps only its hash)."""
    token = _call(ctx, "POST", f"/v1/clusters/{cluster_name}/join-tokens")["token"]
    click.echo(_join_string(ctx, token, agent_url) if as_join_string else token)


def _join_string(ctx: click.Context, token: str, agent_url: str | None) -> str:
    from nodeagent.joinstring import JoinString, check_coordinator_url

    url = agent_url or ctx.find_root().obj.url
    try:
        check_coordinator_url(url)
    except ValueError as exc:
        raise click.BadParameter(f"{url}: {exc}", param_hint="--agent-url") from None
    return str(JoinString(url, token))


def machines_table(machines: list[dict[str, Any]], now: float) -> str:
    header = f"{'HOSTNAME':<20} {'IP':<16} {'ROLE':<8} {'STATE':<12} {'ITEMS':<7} PROGRESS"
    lines = [header]
    for m in machines:
        items = f"{m['items']['done']}/{m['items']['total']}" if m["items"] else "-"
        progress = m["progress"]
        text = ""
        if m["precheck_failures"]:
            text = "prechecks failed: " + "; ".join(m["precheck_failures"])
        elif m["state"] == "Pending" and not m["approved"]:
            text = "waiting for approval"
        elif m["state"] == "Pending" and not m["role"]:
            text = "approved; waiting for a role"
        elif progress:
            text = f"{progress['item']} {progress['status']} (attempt {progress['attempt']})"
            if progress["status"] == "failed":
                retry = progress.get("next_retry_at")
                if retry:
                    text += f", retry in {max(0, retry - now):.0f}s"
                text += f": {progress['error']}"
        if not m["responding"]:
            text = "NOT RESPONDING " + text
        lines.append(f"{m['hostname']:<20} {m['ip'] or '-':<16} {m['role'] or '-':<8} "
                     f"{m['state']:<12} {items:<7} {text}".rstrip())
    return "\n".join(lines)


@main.group(invoke_without_command=True)
@click.option("--cluster", "cluster_name", help="Only this cluster's machines.")
@output_option
@click.pass_context
def machines(ctx: click.Context, cluster_name: str | None, output: str) -> None:
    """List machines with their state and item progress; `machines add` installs an agent."""
    if ctx.invoked_subcommand is not None:
        return
    path = "/v1/machines" + (f"?cluster={cluster_name}" if cluster_name else "")
    data = _call(ctx, "GET", path)
    if not _emit(data, output):
        click.echo(machines_table(data, time.time()))


@main.command()
@click.argument("machine")
@click.option("--role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def approve(ctx: click.Context, machine: str, role: str | None) -> None:
    """Approve a Pending machine (by hostname or id), optionally giving its role."""
    body = {"role": role} if role else {}
    data = _call(ctx, "POST", f"/v1/machines/{machine}/approve", body=body)
    click.echo(f"{data['hostname']} approved" + (f" as {data['role']}" if data["role"] else ""))


@main.command()
@click.argument("machine")
@click.argument("role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def role(ctx: click.Context, machine: str, role: str) -> None:
    """Set the role of a Pending machine."""
    data = _call(ctx, "PUT", f"/v1/machines/{machine}/role", body={"role": role})
    click.echo(f"{data['hostname']} is a {data['role']}")


@main.command()
@click.argument("machine")
@click.option("--force", is_flag=True, help="Remove at once, without running reset items.")
@click.pass_context
def delete(ctx: click.Context, machine: str, force: bool) -> None:
    """Delete a machine: its agent runs the cluster's reset items, then it is removed."""
    data = _call(ctx, "DELETE", f"/v1/machines/{machine}" + ("?force=true" if force else ""))
    click.echo(f"{machine}: {data['status']}")


@main.command()
@click.argument("cluster_name")
@click.option("--watch", "-w", is_flag=True, help="Refresh until interrupted.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between refreshes.")
@output_option
@click.pass_context
def status(ctx: click.Context, cluster_name: str, watch: bool, interval: float,
           output: str) -> None:
    """Each machine's state and item progress in a cluster."""
    while True:
        data = _call(ctx, "GET", f"/v1/clusters/{cluster_name}/status")
        if _emit(data, output) and not watch:
            return
        if output == "table":
            counts = ", ".join(f"{n} {s}" for s, n in sorted(data["counts"].items()))
            text = (f"cluster {data['cluster']}  release {data['release']}  "
                    f"{counts or 'no machines'}\n{machines_table(data['machines'], time.time())}")
            if watch and sys.stdout.isatty():
                click.clear()
            click.echo(text + ("\n" if watch else ""))
        if not watch:
            return
        time.sleep(interval)


@main.command()
@click.option("--cluster", "cluster_name")
@click.option("--machine")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events.")
@output_option
@click.pass_context
def events(ctx: click.Context, cluster_name: str | None, machine: str | None, follow: bool,
           output: str) -> None:
    """The event history: registrations, approvals, state changes, item results."""
    after = 0
    while True:
        query = f"?after_id={after}"
        if cluster_name:
            query += f"&cluster={cluster_name}"
        if machine:
            query += f"&machine={machine}"
        found = _call(ctx, "GET", "/v1/events" + query)
        for event in found:
            if output == "json":
                click.echo(json.dumps(event))
            else:
                stamp = time.strftime("%H:%M:%S", time.localtime(event["time"]))
                click.echo(f"{stamp} {event['cluster']:<12} {event['kind']:<14} {event['message']}")
            after = event["id"]
        if not follow:
            return
        time.sleep(0.5)


@main.command()
def version() -> None:
    """Print the coordinator version."""
    click.echo(__version__)


# The SSH commands live in their own module; registered here so `coordinator --help` lists them.
from coordinator.ssh_cli import agents, machines_add  # noqa: E402

machines.add_command(machines_add)
main.add_command(agents)
