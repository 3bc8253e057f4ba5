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
@click.option("--url", envvar="COORDINATOR_URL", default="https://127.0.0.1:8080",
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
    """Coordinator: holds clusters and machines and orders their rollout."""
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc.strerror}",
                                     param_hint="--token-file") from None
    try:
        ctx.obj = AdminClient(url, token, ca_file=ca_file)
    except OSError as exc:
        raise click.BadParameter(f"cannot load {ca_file}: {exc}", param_hint="--ca") from None


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


data_dir_option = click.option(
    "--data-dir", default="coordinator-data", show_default=True, type=click.Path(file_okay=False),
    help="Database, TLS files (pki/), admin token and artifacts.")
listen_option = click.option("--listen", default="127.0.0.1:8080", show_default=True,
                             help="HOST:PORT to serve on.")
advertise_option = click.option(
    "--advertise-url", help="URL agents use to reach this coordinator; it goes into join strings "
                            "(default: from --listen).")


def _listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("expected HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


def _duration(value: str, option: str) -> float | None:
    from coordinator.tokens import parse_duration

    try:
        return parse_duration(value) or None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


@main.command()
@data_dir_option
@listen_option
@advertise_option
@click.option("--artifacts", type=click.Path(file_okay=False),
              help="Artifact store directory (default DATA_DIR/artifacts).")
@click.option("--insecure-http", is_flag=True,
              help="Serve plain HTTP without TLS: only for a demo on one machine.")
@click.option("--credential-ttl", default="365d", show_default=True,
              help="Lifetime of a machine credential (agents rotate before it ends); 0: forever.")
@click.option("--register-rate", default=5.0, show_default=True,
              help="Registrations a second allowed per client address (bursts of 50); 0: no limit.")
def serve(data_dir: str, listen: str, advertise_url: str | None, artifacts: str | None,
          insecure_http: bool, credential_ttl: str, register_rate: float) -> None:
    """Run the coordinator: HTTPS API plus the reconcile loop, on the embedded SQLite store."""
    from coordinator.server import ServeOptions, serve_forever

    host, port = _listen(listen)
    serve_forever(ServeOptions(
        Path(data_dir), host, port, Path(artifacts) if artifacts else None,
        insecure_http=insecure_http, advertise_url=advertise_url,
        credential_ttl=_duration(credential_ttl, "--credential-ttl"),
        register_rate=register_rate))


@main.command()
@data_dir_option
@listen_option
@advertise_option
@click.option("--name", "names", multiple=True, required=True,
              help="Host name or IP address agents and admins use to reach the coordinator "
                   "(repeatable); all go into the server certificate.")
@click.option("--cluster", "cluster_file", type=click.File("r"),
              help="A first cluster spec to apply; a join string for it is printed.")
@click.option("--join-ttl", default="24h", show_default=True, help="Lifetime of that join token.")
@click.option("--join-max-uses", type=click.IntRange(min=1),
              help="Registrations that join token allows (default: unlimited).")
def init(data_dir: str, listen: str, advertise_url: str | None, names: tuple[str, ...],
         cluster_file: Any, join_ttl: str, join_max_uses: int | None) -> None:
    """Create the CA, the server certificate, an admin token and a first join string."""
    import asyncio

    from coordinator.init import initialize
    from coordinator.model import ClusterSpec
    from coordinator.pki import PkiError
    from coordinator.server import ServeOptions
    from nodeagent.validation import InvalidDocument, load_model

    spec = None
    if cluster_file is not None:
        try:
            spec = load_model(ClusterSpec, cluster_file.read(), cluster_file.name)
        except InvalidDocument as exc:
            click.echo(f"error: bad cluster spec\n{exc}", err=True)
            sys.exit(EXIT_USAGE)
    host, port = _listen(listen)
    options = ServeOptions(Path(data_dir), host, port,
                           advertise_url=advertise_url or f"https://{names[0]}:{port}")
    try:
        done = asyncio.run(initialize(options, list(names), spec,
                                      _duration(join_ttl, "--join-ttl"), join_max_uses))
    except PkiError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"CA certificate:  {options.pki().ca_cert}  ({done.ca_hash})")
    click.echo(f"admin token:     {options.data_dir / 'admin.token'}")
    click.echo(f"start it with:   coordinator serve --data-dir {data_dir} --listen {listen} "
               f"--advertise-url {options.url()}")
    if done.join:
        click.echo(f"join string for cluster {spec.name if spec else ''} (put it in each "
                   f"node's /etc/nodeagent/config.yaml as `join:`):\n{done.join}")


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
    """Join tokens let agents register into one cluster; each has a TTL and a use limit."""


@join_token.command("create")
@click.argument("cluster_name")
@click.option("--ttl", default="24h", show_default=True, help="Lifetime, e.g. 15m, 24h, 7d; 0: forever.")
@click.option("--max-uses", type=click.IntRange(min=1), help="Registrations allowed (default: unlimited).")
@click.option("--token-only", is_flag=True, help="Print the bare token instead of the join string.")
@click.pass_context
def join_token_create(ctx: click.Context, cluster_name: str, ttl: str, max_uses: int | None,
                      token_only: bool) -> None:
    """Create a join token and print its join string (shown once; only its hash is kept)."""
    _duration(ttl, "--ttl")
    data = _call(ctx, "POST", f"/v1/clusters/{cluster_name}/join-tokens",
                 body={"ttl": ttl, "maxUses": max_uses})
    click.echo(data["token"] if token_only else data["join"])


def _when(stamp: float | None, never: str = "never") -> str:
    return never if stamp is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


@join_token.command("list")
@click.argument("cluster_name", required=False)
@output_option
@click.pass_context
def join_token_list(ctx: click.Context, cluster_name: str | None, output: str) -> None:
    """List join tokens (ids only: the secrets are not kept)."""
    data = _call(ctx, "GET", f"/v1/clusters/{cluster_name}/join-tokens" if cluster_name
                 else "/v1/join-tokens")
    if _emit(data, output):
        return
    click.echo(f"{'ID':<14}{'CLUSTER':<16}{'EXPIRES':<18}{'USES':<10}STATUS")
    for t in data:
        uses = f"{t['uses']}/{t['max_uses'] or '-'}"
        expired = t["expires_at"] is not None and t["expires_at"] <= time.time()
        state = "revoked" if t["revoked"] else "expired" if expired else "active"
        click.echo(f"{t['id']:<14}{t['cluster']:<16}{_when(t['expires_at']):<18}{uses:<10}{state}")


@join_token.command("revoke")
@click.argument("token_id")
@click.pass_context
def join_token_revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a join token: no machine can register with it any more."""
    _call(ctx, "DELETE", f"/v1/join-tokens/{token_id}")
    click.echo(f"join token {token_id} revoked")


@main.group("admin-token")
def admin_token() -> None:
    """Tokens for the admin API: role admin (everything) or read-only."""


@admin_token.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(["admin", "read-only"]), default="read-only",
              show_default=True)
@click.pass_context
def admin_token_create(ctx: click.Context, name: str, role: str) -> None:
    """Create an admin API token and print it (shown once)."""
    click.echo(_call(ctx, "POST", "/v1/admin-tokens", body={"name": name, "role": role})["token"])


@admin_token.command("list")
@output_option
@click.pass_context
def admin_token_list(ctx: click.Context, output: str) -> None:
    data = _call(ctx, "GET", "/v1/admin-tokens")
    if _emit(data, output):
        return
    click.echo(f"{'ID':<14}{'NAME':<24}{'ROLE':<12}STATUS")
    for t in data:
        click.echo(f"{t['id']:<14}{t['name']:<24}{t['role']:<12}"
                   f"{'revoked' if t['revoked'] else 'active'}")


@admin_token.command("revoke")
@click.argument("token_id")
@click.pass_context
def admin_token_revoke(ctx: click.Context, token_id: str) -> None:
    _call(ctx, "DELETE", f"/v1/admin-tokens/{token_id}")
    click.echo(f"admin token {token_id} revoked")


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
@click.argument("machine")
@click.pass_context
def revoke(ctx: click.Context, machine: str) -> None:
    """Revoke a machine's credential: its agent is refused until the machine joins anew."""
    data = _call(ctx, "POST", f"/v1/machines/{machine}/revoke")
    click.echo(f"{data['hostname']}: credential revoked")


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
