"""`coordinator` command line: `serve`, and admin commands that talk to a running coordinator."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click
from click.shell_completion import CompletionItem

from coordinator.client import AdminClient, ClientError
from coordinator.texts import clock, duration, machine_note
from nodeagent import __version__

EXIT_ERROR, EXIT_USAGE = 1, 2
DEFAULT_URL = "https://127.0.0.1:8080"
RECONNECT_SECONDS = 1.0


def _read_token(token: str | None, token_file: str | None) -> str | None:
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc.strerror}",
                                     param_hint="--token-file") from None
    return token


def _client(url: str, token: str | None, token_file: str | None, ca_file: str | None,
            timeout: float = 30.0) -> AdminClient:
    try:
        return AdminClient(url, _read_token(token, token_file), timeout=timeout, ca_file=ca_file)
    except OSError as exc:
        raise click.BadParameter(f"cannot load {ca_file}: {exc}", param_hint="--ca") from None


def _completer(path: str, key: str) -> Callable[[click.Context, click.Parameter, str],
                                                list[CompletionItem]]:
    """Shell completion of names the coordinator knows (clusters, machines). The group's
    options (--url, --token, --token-file, --ca and their env vars) say which coordinator to
    ask; anything going wrong completes nothing rather than printing into the shell."""
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        params = ctx.find_root().params
        try:
            client = _client(params.get("url") or DEFAULT_URL, params.get("token"),
                             params.get("token_file"), params.get("ca_file"), timeout=2)
            found = client.get(path)
        except (ClientError, click.BadParameter):
            return []
        return [CompletionItem(item[key]) for item in found
                if str(item[key]).startswith(incomplete)]
    return complete


complete_clusters = _completer("/v1/clusters", "name")
complete_machines = _completer("/v1/machines", "hostname")


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
    ctx.obj = _client(url, token, token_file, ca_file)


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
    """Print data as JSON or YAML when asked; returns whether it did."""
    if output == "json":
        click.echo(json.dumps(data, indent=2))
        return True
    if output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
        return True
    return False


def _emit_record(data: Any, output: str) -> None:
    """One record of a stream: a JSON line, or a YAML document."""
    if output == "json":
        click.echo(json.dumps(data))
    else:
        click.echo("---")
        _emit(data, "yaml")


output_option = click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]),
                             default="table", show_default=True,
                             help="table for people; json or yaml for scripts.")


data_dir_option = click.option(
    "--data-dir", default="coordinator-data", show_default=True, type=click.Path(file_okay=False),
    help="Database, TLS files (pki/), admin token and artifacts.")
listen_option = click.option("--listen", default="127.0.0.1:8080", show_default=True,
                             help="HOST:PORT to serve on.")
store_option = click.option(
    "--store", envvar="COORDINATOR_STORE", metavar="DSN",
    help="Keep state in PostgreSQL (postgresql://USER@HOST:PORT/DATABASE; password from "
         "~/.pgpass or PGPASSWORD) so that several replicas can share it. Default: the embedded "
         "SQLite file DATA_DIR/coordinator.db. Also from $COORDINATOR_STORE.")
advertise_option = click.option(
    "--advertise-url", help="URL agents use to reach this coordinator; it goes into join strings "
                            "(default: from --listen).")


def _listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("expected HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


def _duration(value: str, option: str) -> float | None:
    from coordinator.domain.tokens import parse_duration

    try:
        return parse_duration(value) or None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


@main.command()
@data_dir_option
@listen_option
@advertise_option
@store_option
@click.option("--artifacts", type=click.Path(file_okay=False),
              help="Artifact store directory (default DATA_DIR/artifacts).")
@click.option("--insecure-http", is_flag=True,
              help="Serve plain HTTP without TLS: only for a demo on one machine.")
@click.option("--credential-ttl", default="365d", show_default=True,
              help="Lifetime of a machine credential (agents rotate before it ends); 0: forever.")
@click.option("--register-rate", default=5.0, show_default=True,
              help="Registrations a second allowed per client address (bursts of 50); 0: no limit.")
@click.option("--gc-interval", default=0.25, show_default=True, type=click.FloatRange(min=0),
              help="Seconds between the coordinator's own collections of cyclic garbage, which "
                   "replace CPython's long automatic ones (docs/coordinator.md); 0: CPython's.")
def serve(data_dir: str, listen: str, advertise_url: str | None, store: str | None,
          artifacts: str | None, insecure_http: bool, credential_ttl: str,
          register_rate: float, gc_interval: float) -> None:
    """Run the coordinator: HTTPS API plus the reconcile loop, on the embedded SQLite store or
    on PostgreSQL (--store), where several replicas serve the API and one leads."""
    from coordinator.server.serve import ServeOptions, serve_forever

    host, port = _listen(listen)
    serve_forever(ServeOptions(
        Path(data_dir), host, port, Path(artifacts) if artifacts else None,
        insecure_http=insecure_http, advertise_url=advertise_url,
        credential_ttl=_duration(credential_ttl, "--credential-ttl"),
        register_rate=register_rate, store=_store(store), gc_interval=gc_interval))


def _store(location: str | None) -> str | None:
    from coordinator.server.serve import POSTGRES_SCHEMES

    if location is not None and not location.startswith(POSTGRES_SCHEMES):
        raise click.BadParameter("expected a postgresql://USER@HOST:PORT/DATABASE DSN",
                                 param_hint="--store")
    return location


@main.command()
@data_dir_option
@listen_option
@advertise_option
@store_option
@click.option("--name", "names", multiple=True, required=True,
              help="Host name or IP address agents and admins use to reach the coordinator "
                   "(repeatable); all go into the server certificate.")
@click.option("--cluster", "cluster_file", type=click.File("r"),
              help="A first cluster spec to apply; a join string for it is printed.")
@click.option("--join-ttl", default="24h", show_default=True, help="Lifetime of that join token.")
@click.option("--join-max-uses", type=click.IntRange(min=1),
              help="Registrations that join token allows (default: unlimited).")
def init(data_dir: str, listen: str, advertise_url: str | None, store: str | None,
         names: tuple[str, ...], cluster_file: Any, join_ttl: str,
         join_max_uses: int | None) -> None:
    """Create the CA, the server certificate, an admin token and a first join string."""
    import asyncio

    from coordinator.domain.model import ClusterSpec
    from coordinator.server.init import initialize
    from coordinator.server.pki import PkiError
    from coordinator.server.serve import ServeOptions, SetupError
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
                           advertise_url=advertise_url or f"https://{names[0]}:{port}",
                           store=_store(store))
    try:
        done = asyncio.run(initialize(options, list(names), spec,
                                      _duration(join_ttl, "--join-ttl"), join_max_uses))
    except (PkiError, SetupError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"CA certificate:  {options.pki().ca_cert}  ({done.ca_hash})")
    click.echo(f"admin token:     {options.data_dir / 'admin.token'}")
    click.echo(f"start it with:   coordinator serve --data-dir {data_dir} --listen {listen} "
               f"--advertise-url {options.url()}" + (" --store DSN" if store else ""))
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
@click.argument("name", required=False, shell_complete=complete_clusters)
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
@click.argument("name", shell_complete=complete_clusters)
@click.pass_context
def cluster_delete(ctx: click.Context, name: str) -> None:
    """Reset every machine of the cluster, then remove it."""
    _call(ctx, "DELETE", f"/v1/clusters/{name}")
    click.echo(f"cluster {name}: machines are resetting; it goes when they are done")


@main.group("join-token")
def join_token() -> None:
    """Join tokens let agents register into one cluster; each has a TTL and a use limit."""


@join_token.command("create")
@click.argument("cluster_name", shell_complete=complete_clusters)
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
@click.argument("cluster_name", required=False, shell_complete=complete_clusters)
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


def machines_table(machines: list[dict[str, Any]]) -> str:
    header = f"{'HOSTNAME':<20} {'IP':<16} {'ROLE':<8} {'STATE':<12} {'ITEMS':<7} PROGRESS"
    lines = [header]
    for m in machines:
        step = m.get("step") or {}
        items = f"{step['done']}/{step['total']}" if step.get("phase") else "-"
        text = machine_note(m)
        if step.get("status") == "running":
            text = (f"{step['index']}/{step['total']} {step['item']} running (attempt "
                    f"{step['attempt']}, {duration(step['item_elapsed'])}) {text}")
        elif step.get("status") == "failed":
            text = f"{step['index']}/{step['total']} {step['item']} attempt {step['attempt']} {text}"
        progress = m["progress"]
        drain = m.get("drain")
        if drain and drain["stage"] != "NodeReady" and not (
                progress and drain["stage"] in ("Drained", "Skipped")):
            text = f"drain {drain['stage']} (attempt {drain['attempt']}): {drain['message']}"
            if drain["stage"] == "Blocked":
                text += f"; coordinator upgrade retry|skip|force {m['hostname']}"
        lines.append(f"{m['hostname']:<20} {m['ip'] or '-':<16} {m['role'] or '-':<8} "
                     f"{m['state']:<12} {items:<7} {text}".rstrip())
    return "\n".join(lines)


@main.group(invoke_without_command=True)
@click.option("--cluster", "cluster_name", help="Only this cluster's machines.",
              shell_complete=complete_clusters)
@output_option
@click.pass_context
def machines(ctx: click.Context, cluster_name: str | None, output: str) -> None:
    """List machines with their state and item progress (or: machines get|logs|add)."""
    if ctx.invoked_subcommand is not None:
        return
    path = "/v1/machines" + (f"?{urlencode({'cluster': cluster_name})}" if cluster_name else "")
    data = _call(ctx, "GET", path)
    if not _emit(data, output):
        click.echo(machines_table(data))


@machines.command("get")
@click.argument("machine", shell_complete=complete_machines)
@output_option
@click.pass_context
def machines_get(ctx: click.Context, machine: str, output: str) -> None:
    """One machine in full: state, step, facts, precheck report."""
    data = _call(ctx, "GET", f"/v1/machines/{machine}")
    if _emit(data, output):
        return
    click.echo(machines_table([data]))
    click.echo(f"\nid {data['id']}  cluster {data['cluster']}  in {data['state']} for "
               f"{duration(data['step']['state_elapsed'])}  last seen {clock(data['last_seen'])}")


def _print_item(event: dict[str, Any], output: str) -> None:
    """An item report as a log: a header line, then the output the agent sent."""
    if output != "table":
        _emit_record(event, output)
        return
    data = event["data"]
    head = (f"── {clock(event['time'])} {event['hostname']} {data['phase']}/{data['item']} "
            f"attempt {data['attempt']} {data['status']}")
    if data["status"] != "running":
        exit_code = "" if data.get("exit_code") is None else f"exit {data['exit_code']}, "
        head += f" ({exit_code}{duration(data.get('duration'))})"
    if data.get("error"):
        head += f": {data['error']}"
    click.echo(head)
    if data.get("output"):
        click.echo(data["output"], nl=not data["output"].endswith("\n"))


def _history(ctx: click.Context, query: dict[str, Any], tail: int | None) -> Iterator[dict[str, Any]]:
    """Every event matching query, oldest first; with tail, only the last that many."""
    if tail is not None:
        found = _call(ctx, "GET", "/v1/events?" + urlencode({**query, "order": "desc",
                                                             "limit": tail}))
        yield from reversed(found)
        return
    after = 0
    while page := _call(ctx, "GET", "/v1/events?" + urlencode({**query, "after_id": after})):
        yield from page
        after = page[-1]["id"]


def _follow(ctx: click.Context, query: dict[str, Any], after: int,
            handle: Callable[[dict[str, Any]], None]) -> None:
    """New events as the coordinator records them (server-sent events), until interrupted;
    reconnects after the last event seen when the coordinator goes away."""
    client: AdminClient = ctx.obj
    warned = False
    while True:
        try:
            for event in client.stream("/v1/events/stream?"
                                       + urlencode({**query, "after_id": after})):
                handle(event)
                after = event["id"]
                warned = False
        except ClientError as exc:
            if exc.status not in (0, 502, 503, 504):
                click.echo(f"error: {exc}", err=True)
                sys.exit(EXIT_USAGE if exc.status in (400, 422) else EXIT_ERROR)
            if not warned:
                click.echo(f"warning: {exc}; reconnecting", err=True)
                warned = True
        time.sleep(RECONNECT_SECONDS)


@machines.command("logs")
@click.argument("machine", shell_complete=complete_machines)
@click.option("--follow", "-f", is_flag=True, help="Keep printing output as items report it.")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N item reports.")
@output_option
@click.pass_context
def machines_logs(ctx: click.Context, machine: str, follow: bool, tail: int | None,
                  output: str) -> None:
    """The output of a machine's items (the last 4 KiB of each attempt, as reported)."""
    found = _call(ctx, "GET", f"/v1/machines/{machine}")
    query = {"machine": found["id"], "kind": "item"}
    after = 0
    for event in _history(ctx, query, tail):
        _print_item(event, output)
        after = event["id"]
    if follow:
        if after == 0:
            after = max((e["id"] for e in _call(ctx, "GET", "/v1/events?order=desc&limit=1")),
                        default=0)
        with _interrupt_quietly():
            _follow(ctx, query, after, lambda event: _print_item(event, output))


@contextlib.contextmanager
def _interrupt_quietly() -> Iterator[None]:
    """Ctrl-C ends a --follow or --watch without a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("", err=True)


@main.command()
@click.argument("machine", shell_complete=complete_machines)
@click.option("--role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def approve(ctx: click.Context, machine: str, role: str | None) -> None:
    """Approve a Pending machine (by hostname or id), optionally giving its role."""
    body = {"role": role} if role else {}
    data = _call(ctx, "POST", f"/v1/machines/{machine}/approve", body=body)
    click.echo(f"{data['hostname']} approved" + (f" as {data['role']}" if data["role"] else ""))


@main.command()
@click.argument("machine", shell_complete=complete_machines)
@click.argument("role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def role(ctx: click.Context, machine: str, role: str) -> None:
    """Set the role of a Pending machine."""
    data = _call(ctx, "PUT", f"/v1/machines/{machine}/role", body={"role": role})
    click.echo(f"{data['hostname']} is a {data['role']}")


@main.command()
@click.argument("machine", shell_complete=complete_machines)
@click.option("--force", is_flag=True, help="Remove at once, without running reset items.")
@click.pass_context
def delete(ctx: click.Context, machine: str, force: bool) -> None:
    """Delete a machine: its agent runs the cluster's reset items, then it is removed."""
    data = _call(ctx, "DELETE", f"/v1/machines/{machine}" + ("?force=true" if force else ""))
    click.echo(f"{machine}: {data['status']}")


@main.command()
@click.argument("machine", shell_complete=complete_machines)
@click.pass_context
def revoke(ctx: click.Context, machine: str) -> None:
    """Revoke a machine's credential: its agent is refused until the machine joins anew."""
    data = _call(ctx, "POST", f"/v1/machines/{machine}/revoke")
    click.echo(f"{data['hostname']}: credential revoked")


@main.command()
@click.argument("cluster_name", shell_complete=complete_clusters)
@click.option("--watch", "-w", is_flag=True,
              help="Redraw live, with progress bars and an ETA, until interrupted.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between refreshes.")
@output_option
@click.pass_context
def status(ctx: click.Context, cluster_name: str, watch: bool, interval: float,
           output: str) -> None:
    """The cluster's stages, the rollout's progress and each machine's step."""
    path = f"/v1/clusters/{cluster_name}/status"
    data = _call(ctx, "GET", path)
    if output != "table":
        if not watch:
            _emit(data, output)
            return
        with _interrupt_quietly():
            while True:
                _emit_record(data, output)
                time.sleep(interval)
                data = _call(ctx, "GET", path)
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from coordinator.console import status_renderable

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a pipe or file gets whole lines
    if not watch:
        console.print(status_renderable(data))
        return
    client: AdminClient = ctx.obj
    with _interrupt_quietly(), Live(status_renderable(data), console=console,
                                    auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            try:
                data = client.get(path)
                live.update(status_renderable(data), refresh=True)
            except ClientError as exc:  # keep the last picture; say why it is stale
                live.update(Group(status_renderable(data), Text(f"\n{exc}: retrying", "bold red")),
                            refresh=True)


SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(value: str, now: float) -> float:
    """10m, 2h, 1d ago; an ISO 8601 time (local unless it names a zone); or a unix time."""
    if match := re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", value.strip()):
        return now - float(match[1]) * SINCE_UNITS[match[2]]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected a duration like 10m, 2h or 1d, an ISO "
                                 "time like 2026-01-31T14:00, or a unix time",
                                 param_hint="--since") from None


@main.command()
@click.option("--cluster", "cluster_name", shell_complete=complete_clusters)
@click.option("--machine", help="Hostname or id.", shell_complete=complete_machines)
@click.option("--kind", "kinds", multiple=True,
              help="Only these kinds (repeat): registered, approved, state, item, ...")
@click.option("--since", help="Only events since: 10m, 2h, 1d, an ISO time or a unix time.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they happen.")
@output_option
@click.pass_context
def events(ctx: click.Context, cluster_name: str | None, machine: str | None,
           kinds: tuple[str, ...], since: str | None, follow: bool, output: str) -> None:
    """The event history: registrations, approvals, state changes, item results.
    json prints one event per line, yaml one document per event."""
    query: dict[str, Any] = {}
    if cluster_name:
        query["cluster"] = cluster_name
    if machine:
        query["machine"] = machine
    if kinds:
        query["kind"] = ",".join(kinds)
    if since:
        query["since"] = parse_since(since, time.time())

    def show(event: dict[str, Any]) -> None:
        if output != "table":
            _emit_record(event, output)
        else:
            click.echo(f"{clock(event['time'])} {event['cluster']:<12} "
                       f"{event['hostname'] or '-':<16} {event['kind']:<14} {event['message']}")

    after = 0
    for event in _history(ctx, query, None):
        show(event)
        after = event["id"]
    if follow:
        with _interrupt_quietly():
            _follow(ctx, query, after, show)


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(coordinator completion bash)"."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # click ships all three
    click.echo(completer(main, {}, "coordinator", "_COORDINATOR_COMPLETE").source())


@main.group()
def upgrade() -> None:
    """Upgrades: the dry-run plan, pause and resume, and each machine's drain."""


@upgrade.command("plan")
@click.argument("cluster_name")
@click.option("-f", "--file", "path", type=click.File("r"),
              help="A new cluster spec: the plan its apply would start (default: the stored one).")
@output_option
@click.pass_context
def upgrade_plan(ctx: click.Context, cluster_name: str, path: Any, output: str) -> None:
    """Show the order and batches the upgrade will take, before anything runs."""
    where = f"/v1/clusters/{cluster_name}/upgrade-plan"
    data = (_call(ctx, "POST", where, text=path.read(), content_type="application/yaml") if path
            else _call(ctx, "GET", where))
    if _emit(data, output):
        return
    note = " (paused: resume to start)" if data["paused"] else ""
    click.echo(f"upgrade of {data['cluster']} to release {data['release']}{note}")
    if not data["steps"] and not data["waiting"]:
        click.echo("nothing to upgrade")
    for number, step in enumerate(data["steps"], 1):
        hosts = ", ".join(f"{m['hostname']} ({m['role']}, from {m['from'] or '-'})" for m in step)
        click.echo(f"step {number}: {hosts}")
    for m in data["waiting"]:
        click.echo(f"not reached: {m['hostname']} ({m['role']}): {m['reason']}")


def _pause_command(verb: str, help_text: str) -> None:
    @upgrade.command(verb, help=help_text)
    @click.argument("cluster_name")
    @click.pass_context
    def command(ctx: click.Context, cluster_name: str) -> None:
        _call(ctx, "POST", f"/v1/clusters/{cluster_name}/upgrade/{verb}")
        click.echo(f"cluster {cluster_name}: upgrade {verb}d")


_pause_command("pause", "No machine starts upgrading; those upgrading finish.")
_pause_command("resume", "Let the upgrade go on.")


def _drain_command(action: str, help_text: str) -> None:
    @upgrade.command(action, help=help_text)
    @click.argument("machine")
    @click.pass_context
    def command(ctx: click.Context, machine: str) -> None:
        data = _call(ctx, "POST", f"/v1/machines/{machine}/drain/{action}")
        click.echo(f"{data['hostname']}: drain {data['drain']['stage']} "
                   f"(attempt {data['drain']['attempt']})")


_drain_command("retry", "Drain the machine's node again, with a new timeout.")
_drain_command("skip", "Upgrade the machine with the pods its drain could not move.")
_drain_command("force", "Drain again, deleting the pods budgets protect (bypassing them).")


@main.command()
def version() -> None:
    """Print the coordinator version."""
    click.echo(__version__)


# The SSH commands live in their own module; registered here so `coordinator --help` lists them.
from coordinator.ssh_cli import agents, machines_add  # noqa: E402

machines.add_command(machines_add)
main.add_command(agents)
