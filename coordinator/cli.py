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
DEFAULT_URL = "http://127.0.0.1:8080"
RECONNECT_SECONDS = 1.0


def _read_token(token: str | None, token_file: str | None) -> str | None:
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc.strerror}",
                                     param_hint="--token-file") from None
    return token


def _completer(path: str, key: str) -> Callable[[click.Context, click.Parameter, str],
                                                list[CompletionItem]]:
    """Shell completion of names the coordinator knows (clusters, machines). The group's
    options (--url, --token, --token-file and their env vars) say which coordinator to ask;
    anything going wrong completes nothing rather than printing into the shell."""
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        params = ctx.find_root().params
        try:
            token = _read_token(params.get("token"), params.get("token_file"))
            found = AdminClient(params.get("url") or DEFAULT_URL, token, timeout=2).get(path)
        except (ClientError, click.BadParameter):
            return []
        return [CompletionItem(item[key]) for item in found
                if str(item[key]).startswith(incomplete)]
    return complete


complete_clusters = _completer("/v1/clusters", "name")
complete_machines = _completer("/v1/machines", "hostname")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coordinator")
@click.option("--url", envvar="COORDINATOR_URL", default=DEFAULT_URL, show_default=True,
              help="Coordinator address (env COORDINATOR_URL).")
@click.option("--token", envvar="COORDINATOR_TOKEN", help="Admin token (env COORDINATOR_TOKEN).")
@click.option("--token-file", envvar="COORDINATOR_TOKEN_FILE", type=click.Path(dir_okay=False),
              help="File holding the admin token, e.g. DATA_DIR/admin.token.")
@click.pass_context
def main(ctx: click.Context, url: str, token: str | None, token_file: str | None) -> None:
    """Coordinator: holds clusters and machines and orders their rollout.

    Shell completion: eval "$(coordinator completion bash)" (or zsh, fish)."""
    ctx.obj = AdminClient(url, _read_token(token, token_file))


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
    """Join tokens let agents register into a cluster."""


@join_token.command("create")
@click.argument("cluster_name", shell_complete=complete_clusters)
@click.pass_context
def join_token_create(ctx: click.Context, cluster_name: str) -> None:
    """Create a join token (shown once; the coordinator keeps only its hash)."""
    click.echo(_call(ctx, "POST", f"/v1/clusters/{cluster_name}/join-tokens")["token"])


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
        lines.append(f"{m['hostname']:<20} {m['ip'] or '-':<16} {m['role'] or '-':<8} "
                     f"{m['state']:<12} {items:<7} {text}".rstrip())
    return "\n".join(lines)


@main.group(invoke_without_command=True)
@click.option("--cluster", "cluster_name", help="Only this cluster's machines.",
              shell_complete=complete_clusters)
@output_option
@click.pass_context
def machines(ctx: click.Context, cluster_name: str | None, output: str) -> None:
    """List machines with their state and item progress (or: machines get|logs NAME)."""
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


@main.command()
def version() -> None:
    """Print the coordinator version."""
    click.echo(__version__)
