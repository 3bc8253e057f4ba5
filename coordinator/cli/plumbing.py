"""What the commands of the `coordinator` CLI share: the client the root group builds, calling
the API with it (errors become messages and exit codes), the one way to print (`say`,
`echo_lines`, `say_block`: every line escaped, so that no command can print a node's escape
sequences; ruff bans click.echo elsewhere), json/yaml output, shell completion of names,
durations, and reading the event history. Commands import this, never each other."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

import click
from click.shell_completion import CompletionItem

from coordinator.cli.client import AdminClient, ClientError
from coordinator.cli.formatting import block_lines, day_and_time, terminal_safe

EXIT_ERROR, EXIT_USAGE = 1, 2
DEFAULT_URL = "https://127.0.0.1:8080"
RECONNECT_SECONDS = 1.0


def say(line: str, err: bool = False) -> None:
    """Print one line for people: its control characters (newlines too) shown escaped."""
    click.echo(terminal_safe(line), err=err)


def echo_lines(lines: list[str]) -> None:
    for line in lines:
        say(line)


def say_block(text: str, err: bool = False) -> None:
    """Print a multi-line text (an item's output) line by line, each escaped, tabs expanded."""
    for line in block_lines(text):
        say(line.expandtabs(), err=err)


def row_counts(counts: dict[str, int]) -> str:
    """A backup's rows per table, as one line: "1 cluster, 6 machines, ..." (tables are named
    in the plural: "machines", "cluster_outputs")."""
    def rows(name: str, count: int) -> str:
        words = name.replace("_", " ")
        return f"{count} {words[:-1] if count == 1 else words}"

    return ", ".join(rows(name, count) for name, count in counts.items())


def read_token(token: str | None, token_file: str | None) -> str | None:
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc.strerror}",
                                     param_hint="--token-file") from None
    return token


def make_client(url: str, token: str | None, token_file: str | None, ca_file: str | None,
                timeout: float = 30.0) -> AdminClient:
    try:
        return AdminClient(url, read_token(token, token_file), timeout=timeout, ca_file=ca_file)
    except OSError as exc:
        raise click.BadParameter(f"cannot load {ca_file}: {exc}", param_hint="--ca") from None


def completer(path: str, key: str, search: str = "") -> Callable[
        [click.Context, click.Parameter, str], list[CompletionItem]]:
    """Shell completion of names the coordinator knows (clusters, machines). The group's
    options (--url, --token, --token-file, --ca and their env vars) say which coordinator to
    ask; anything going wrong completes nothing rather than printing into the shell, and a
    name holding control characters (an old record's) is left out rather than shown. With
    search, the path answers a page of machines (GET /v1/machines) and its `search`
    parameter narrows it to the names holding what is typed."""
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        params = ctx.find_root().params
        try:
            client = make_client(params.get("url") or DEFAULT_URL, params.get("token"),
                                 params.get("token_file"), params.get("ca_file"), timeout=2)
            found = client.get(f"{path}?{urlencode({search: incomplete, 'limit': 1000})}"
                               if search else path)
        except (ClientError, click.BadParameter):
            return []
        if search:
            found = found["machines"]
        names = [str(item[key]) for item in found]
        return [CompletionItem(name) for name in names
                if name.startswith(incomplete) and terminal_safe(name) == name]
    return complete


complete_clusters = completer("/v1/clusters", "name")
complete_machines = completer("/v1/machines", "hostname", search="q")


@dataclass(frozen=True)
class MachineRef:
    """A machine as a command names it: hostname or id, and the cluster when the hostname is
    in several (`--cluster`); shown as the name given."""

    name: str
    cluster: str | None = None

    def path(self, suffix: str = "", **query: str) -> str:
        """The API path of the machine (and suffix), with the cluster and query in its query."""
        asked = {**({"cluster": self.cluster} if self.cluster else {}), **query}
        return (f"/v1/machines/{quote(self.name, safe='')}{suffix}"
                + (f"?{urlencode(asked)}" if asked else ""))

    def __str__(self) -> str:
        return self.name


def machine_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    """The MACHINE argument and its --cluster option, given to the command as one MachineRef
    named machine."""
    @functools.wraps(command)
    def with_ref(*args: Any, machine: str, machine_cluster: str | None, **kwargs: Any) -> Any:
        return command(*args, machine=MachineRef(machine, machine_cluster), **kwargs)

    option = click.option("--cluster", "machine_cluster", shell_complete=complete_clusters,
                          help="The machine's cluster, when its hostname is in several.")
    return click.argument("machine", shell_complete=complete_machines)(option(with_ref))


def call(ctx: click.Context, method: str, path: str, **kwargs: Any) -> Any:
    """The API's answer; on an error, its message and problems on stderr and exit 2 for a
    request the coordinator refused as invalid, 1 for anything else."""
    client: AdminClient = ctx.obj
    try:
        return client.request(method, path, **kwargs)
    except ClientError as exc:
        fail(exc)


def fail(exc: ClientError) -> NoReturn:
    """The API's error on stderr (each problem once), and the exit code of call."""
    for line in _problems_shown(exc):
        say(line, err=True)
    sys.exit(EXIT_USAGE if exc.status in (400, 422) else EXIT_ERROR)


def history_id(ctx: click.Context, machine: MachineRef) -> str:
    """The id whose history (events, item output) a command shows for machine: the machine's,
    live; else that of the record of that id or hostname deleted last, said on stderr with
    the older ones, which their ids pick."""
    client: AdminClient = ctx.obj
    try:
        return str(client.request("GET", machine.path())["id"])
    except ClientError as exc:
        if exc.status not in (404, 410):  # not "no such machine"
            fail(exc)
    asked = {"ref": machine.name, **({"cluster": machine.cluster} if machine.cluster else {})}
    removed = call(ctx, "GET", f"/v1/removed-machines?{urlencode(asked)}")
    if not removed:
        say(f"error: no machine with id or hostname {machine}, now or deleted", err=True)
        sys.exit(EXIT_ERROR)
    latest, older = removed[0], removed[1:]
    say(f"{latest['hostname']} was deleted from cluster {latest['cluster']} at "
        f"{day_and_time(latest['removed_at'])}: history of machine {latest['id']}"
        + (f" (the last of {len(removed)} deleted machines of that name; the others by id: "
           + ", ".join(r["id"] for r in older) + ")" if older else ""), err=True)
    return str(latest["id"])


def _problems_shown(exc: ClientError) -> list[str]:
    """What to print of an error, once: the API's message repeats every problem (for clients
    that read nothing else), so one problem is that message alone and several are its
    headline then one problem a line."""
    if len(exc.problems) < 2:
        return [f"error: {exc}"]
    lines = [f"error: {str(exc).split(':', 1)[0]} ({len(exc.problems)} problems):"]
    for problem in exc.problems:
        line = f"line {problem['line']}: " if problem.get("line") else ""
        path_text = f"{problem['path']}: " if problem.get("path") else ""
        lines.append(f"  {line}{path_text}{problem['message']}")
    return lines


yes_option = click.option("--yes", "-y", is_flag=True,
                          help="Do it without asking (needed when not at a terminal).")

allow_downgrade_option = click.option(
    "--allow-downgrade", is_flag=True,
    help="Accept a lower settings.kubernetes.version than the cluster runs (one minor at "
    "most); recorded in an event. Refused without it.")


def downgrade_query(allow_downgrade: bool) -> str:
    """The query string that forces a downgrade (`cluster apply`, `upgrade plan`)."""
    return "?allowDowngrade=true" if allow_downgrade else ""


def confirm(question: str, yes: bool) -> None:
    """Go on only when the operator said so: --yes, or `y` at the prompt. Without a terminal
    to ask at (a script, a pipe) it refuses, saying to pass --yes, rather than guess."""
    if yes:
        return
    if not sys.stdin.isatty():
        say(f"error: {question} Not at a terminal to ask: pass --yes to go ahead.", err=True)
        sys.exit(EXIT_USAGE)
    if not click.confirm(terminal_safe(question), default=False):
        say("nothing done", err=True)
        sys.exit(EXIT_ERROR)


def emit(data: Any, output: str) -> bool:
    """Print data as JSON or YAML when asked; returns whether it did."""
    if output == "json":
        click.echo(json.dumps(data, indent=2))
        return True
    if output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
        return True
    return False


def emit_record(data: Any, output: str) -> None:
    """One record of a stream: a JSON line, or a YAML document."""
    if output == "json":
        click.echo(json.dumps(data))
    else:
        click.echo("---")
        emit(data, "yaml")


output_option = click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]),
                             default="table", show_default=True,
                             help="table for people; json or yaml for scripts.")


def parse_duration(value: str, option: str) -> float | None:
    """Seconds, or None for 0 (forever); a bad value is the named option's error."""
    from coordinator.domain.machines.tokens import parse_duration as seconds

    try:
        return seconds(value) or None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


@contextlib.contextmanager
def interrupt_quietly() -> Iterator[None]:
    """Ctrl-C ends a --follow or --watch without a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        say("", err=True)


def event_history(ctx: click.Context, query: dict[str, Any], tail: int | None) -> Iterator[dict[str, Any]]:
    """Every event matching query, oldest first; with tail, only the last that many."""
    if tail is not None:
        found = call(ctx, "GET", "/v1/events?" + urlencode({**query, "order": "desc",
                                                            "limit": tail}))
        yield from reversed(found)
        return
    after = 0
    while page := call(ctx, "GET", "/v1/events?" + urlencode({**query, "after_id": after})):
        yield from page
        after = page[-1]["id"]


def follow_events(ctx: click.Context, query: dict[str, Any], after: int,
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
                say(f"error: {exc}", err=True)
                sys.exit(EXIT_USAGE if exc.status in (400, 422) else EXIT_ERROR)
            if not warned:
                say(f"warning: {exc}; reconnecting", err=True)
                warned = True
        time.sleep(RECONNECT_SECONDS)
