"""`coordinator machines [get|logs|label|retry|reissue]` and the commands that act on one
machine: approve, role, delete, revoke. (`machines add`, which works over SSH, lives with the
other SSH commands.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import click

from coordinator.cli.client import PAGE_LIMIT, AdminClient, ClientError
from coordinator.cli.formatting import (
    day_and_time,
    item_header,
    labels_text,
    machine_full,
    machines_table,
    remediation_lines,
)
from coordinator.cli.plumbing import (
    MachineRef,
    call,
    complete_clusters,
    confirm,
    echo_lines,
    emit,
    emit_record,
    event_history,
    fail,
    follow_events,
    history_id,
    interrupt_quietly,
    machine_argument,
    output_option,
    parse_duration,
    say,
    say_block,
    yes_option,
)

T = TypeVar("T")


@click.group(invoke_without_command=True)
@click.option("--cluster", "cluster_name", help="Only this cluster's machines.",
              shell_complete=complete_clusters)
@click.option("--pool", is_flag=True, help="Only the pool's machines (of no cluster yet).")
@click.option("--state", "states", multiple=True,
              help="Only machines in these states (repeat, or comma-separated: Deploy,Ready).")
@click.option("--role", type=click.Choice(["manager", "worker"]), help="Only this role.")
@click.option("--label", "labels", multiple=True,
              help="Only machines with this label: KEY=VALUE, or KEY for any value (repeat: all "
                   "must match).")
@click.option("--search", help="Only machines whose hostname or IP holds this (any case).")
@click.option("--responding/--not-responding", default=None,
              help="Only machines whose agent answers (or: has gone quiet).")
@click.option("--sort", help="hostname (default), state, role, cluster, ip, last_seen or "
                             "state_since; -FIELD for the descending order.")
@click.option("--limit", type=click.IntRange(1, PAGE_LIMIT),
              help="Machines per page (default 100).")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many first.")
@click.option("--all", "every", is_flag=True,
              help="Every page (the default for -o json and yaml without --limit or --offset).")
@click.option("--show-labels", is_flag=True, help="A LABELS column too.")
@output_option
@click.pass_context
def machines(ctx: click.Context, cluster_name: str | None, pool: bool, states: tuple[str, ...],
             role: str | None, labels: tuple[str, ...], search: str | None,
             responding: bool | None, sort: str | None, limit: int | None, offset: int,
             every: bool, show_labels: bool, output: str) -> None:
    """List machines with their state and item progress, a page at a time, filtered and
    sorted by the coordinator (or: machines get|logs|label|add). A table shows one page and
    says how to see the next; json and yaml print every machine selected, as a list."""
    if ctx.invoked_subcommand is not None:
        return
    query = [(name, value) for name, value in (
        ("cluster", cluster_name), ("pool", "true" if pool else None),
        ("state", ",".join(states)), ("role", role),
        ("q", search), ("sort", sort),
        ("responding", None if responding is None else str(responding).lower()))
        if value] + [("label", label) for label in labels]
    if every or (output != "table" and limit is None and not offset):
        data = _listed(ctx, lambda client: client.all_machines(query))
        if not emit(data, output):
            echo_lines(machines_table(data, show_labels))
        return
    page = _listed(ctx, lambda client: client.machine_page(
        [*query, ("offset", str(offset))] + ([("limit", str(limit))] if limit else [])))
    if not emit(page["machines"], output):
        echo_lines(machines_table(page["machines"], show_labels))
        say(page_footer(page), err=True)


def _listed(ctx: click.Context, read: Callable[[AdminClient], T]) -> T:
    """What read got of the client, or the API's refusal said as call says it."""
    try:
        return read(ctx.obj)
    except ClientError as exc:
        fail(exc)


def page_footer(page: dict[str, Any]) -> str:
    """Which machines the page shows of how many, and how to see the next page."""
    shown, total, offset = len(page["machines"]), page["total"], page["offset"]
    if not shown:
        return f"no machines here: {total} match" + (f" (offset {offset})" if offset else "")
    footer = f"showing {offset + 1}-{offset + shown} of {total}"
    if offset + shown < total:
        footer += f"; the next page: --offset {offset + shown} (every page: --all)"
    return footer


@machines.command("get")
@machine_argument
@output_option
@click.pass_context
def machines_get(ctx: click.Context, machine: MachineRef, output: str) -> None:
    """One machine in full: state and why, prechecks, each item of its phase and where it
    stands, labels, Node, address, disks (json and yaml: every field, facts and the precheck
    report too)."""
    data = call(ctx, "GET", machine.path())
    if not emit(data, output):
        echo_lines(machine_full(data))


def print_item(event: dict[str, Any], output: str) -> None:
    """An item report as a log: a header line, then the output the agent sent."""
    if output != "table":
        emit_record(event, output)
        return
    say(item_header(event))
    text = event["data"].get("output")
    if text:
        say_block(text)


@machines.command("logs")
@machine_argument
@click.option("--follow", "-f", is_flag=True, help="Keep printing output as items report it.")
@click.option("--tail", type=click.IntRange(1, 1000), help="Only the last N item reports.")
@output_option
@click.pass_context
def machines_logs(ctx: click.Context, machine: MachineRef, follow: bool, tail: int | None,
                  output: str) -> None:
    """The output of a machine's items (the last 4 KiB of each attempt, as reported); a
    deleted machine's too, by its id or hostname (the last deleted of that name)."""
    query = {"machine": history_id(ctx, machine), "kind": "item"}
    after = 0
    for event in event_history(ctx, query, tail):
        print_item(event, output)
        after = event["id"]
    if follow:
        if after == 0:
            after = max((e["id"] for e in call(ctx, "GET", "/v1/events?order=desc&limit=1")),
                        default=0)
        with interrupt_quietly():
            follow_events(ctx, query, after, lambda event: print_item(event, output))


def label_changes(changes: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE sets a label, KEY- removes it (kubectl label's syntax): the API's body."""
    put: dict[str, str] = {}
    remove: list[str] = []
    for change in changes:
        key, equals, value = change.partition("=")
        if equals:
            put[key] = value
        elif change.endswith("-") and len(change) > 1:
            remove.append(change[:-1])
        else:
            raise click.BadParameter(f"{change!r}: write KEY=VALUE to set a label, KEY- to "
                                     "remove it", param_hint="LABELS")
    return {"set": put, "remove": remove}


@click.command()
@machine_argument
@click.option("--role", type=click.Choice(["manager", "worker"]))
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="A label for the machine (repeat for more).")
@click.option("--interface", help="Its cluster address is this interface's IPv4, as its node "
              "reported it (default: the address it registered with).")
@click.option("--ip", help="Its cluster address: one of the addresses its node reported.")
@click.pass_context
def approve(ctx: click.Context, machine: MachineRef, role: str | None, labels: tuple[str, ...],
            interface: str | None, ip: str | None) -> None:
    """Approve a Pending machine (by hostname or id), optionally giving its role, labels and
    cluster address."""
    changes = label_changes(labels)
    if changes["remove"]:
        raise click.BadParameter("write KEY=VALUE", param_hint="--label")
    body = {"role": role, "labels": changes["set"], "interface": interface, "ip": ip}
    data = call(ctx, "POST", machine.path("/approve"),
                body={key: value for key, value in body.items() if value})
    say(f"{data['hostname']} approved" + (f" as {data['role']}" if data["role"] else "")
               + f" at {data['ip'] or data['hostname']}"
               + (f" with labels {labels_text(data['labels'])}" if data["labels"] else ""))


@machines.command("label")
@machine_argument
@click.argument("changes", metavar="LABELS...", nargs=-1, required=True)
@click.pass_context
def machines_label(ctx: click.Context, machine: MachineRef, changes: tuple[str, ...]) -> None:
    """Set (KEY=VALUE) and remove (KEY-) a machine's labels, as kubectl label does; items
    that use them see the new ones in its next assignment."""
    data = call(ctx, "PATCH", machine.path("/labels"), body=label_changes(changes))
    say(f"{data['hostname']} labels: {labels_text(data['labels']) or 'none'}")


@machines.command("remediate")
@click.option("--dry-run", is_flag=True, help="Show what the health policy would do now "
              "(the only mode: it acts on its own, every reconcile pass).")
@click.option("--cluster", "cluster_name", help="Only this cluster (default: every one).",
              shell_complete=complete_clusters)
@output_option
@click.pass_context
def machines_remediate(ctx: click.Context, dry_run: bool, cluster_name: str | None,
                       output: str) -> None:
    """The health policy (settings.health) of each cluster: its unhealthy machines, which it
    would replace from the pool now, and what holds it back (health.maxUnhealthy, the quorum
    guard)."""
    if not dry_run:
        raise click.UsageError("the health policy remediates by itself on every reconcile "
                               "pass: --dry-run shows what it would do now")
    names = [cluster_name] if cluster_name else [c["name"] for c in call(ctx, "GET",
                                                                        "/v1/clusters")]
    plans = [call(ctx, "GET", f"/v1/clusters/{quote(name, safe='')}/remediation")
             for name in names]
    if not emit(plans, output):
        echo_lines([line for plan in plans for line in remediation_lines(plan)])


@machines.command("retry")
@machine_argument
@click.pass_context
def machines_retry(ctx: click.Context, machine: MachineRef) -> None:
    """Run again the item the machine's agent gave up on (it failed retry.maxAttempts times),
    with a fresh attempt budget: once its cause is fixed."""
    data = call(ctx, "POST", machine.path("/retry"))
    say(f"{data['hostname']}: {data['progress']['item']} runs again (retry {data['retries']})")


@click.command()
@machine_argument
@click.argument("role", type=click.Choice(["manager", "worker"]))
@click.pass_context
def role(ctx: click.Context, machine: MachineRef, role: str) -> None:
    """Set the role of a Pending machine."""
    data = call(ctx, "PUT", machine.path("/role"), body={"role": role})
    say(f"{data['hostname']} is a {data['role']}")


@click.command()
@machine_argument
@click.option("--force", is_flag=True, help="Delete a manager even though the quorum guard "
              "refuses (another manager not Ready, or too few managers would be left).")
@click.option("--skip-reset", is_flag=True, help="Remove the record at once: no drain, no "
              "reset items, no Node deletion (a machine that is gone for good).")
@yes_option
@click.pass_context
def delete(ctx: click.Context, machine: MachineRef, force: bool, skip_reset: bool,
           yes: bool) -> None:
    """Delete a machine: its node is drained, its agent runs the cluster's reset items, its
    Node is deleted, then its record goes. Managers leave one at a time, a majority left.
    The first manager (${managers.first}) only once confirmed (--yes: without asking)."""
    found = call(ctx, "GET", machine.path())
    if found.get("first_manager"):
        confirm(f"{found['hostname']} is the first manager of {found['cluster']} "
                "(${managers.first}: the manager the others joined through). Delete it?", yes)
    asked = {key: "true" for key, on in (("force", force), ("skipReset", skip_reset)) if on}
    data = call(ctx, "DELETE", machine.path(**asked))
    say(f"{machine}: {data['status']}")


@click.command()
@machine_argument
@click.pass_context
def revoke(ctx: click.Context, machine: MachineRef) -> None:
    """Revoke a machine's credential: its agent is refused until the machine joins anew."""
    data = call(ctx, "POST", machine.path("/revoke"))
    say(f"{data['hostname']}: credential revoked")


@machines.command("reissue")
@machine_argument
@click.option("--ttl", default="1h", show_default=True,
              help="How long the string is good for, e.g. 15m, 1h, 2d.")
@click.pass_context
def machines_reissue(ctx: click.Context, machine: MachineRef, ttl: str) -> None:
    """Give a machine a new credential, keeping its record, items and history: its current
    credential is revoked and a one-use join string bound to it printed (shown once). On that
    host, set `join:` in the agent's config to it, remove identity.json from its state dir
    and restart nodeagent: it registers again as the same machine."""
    parse_duration(ttl, "--ttl")
    data = call(ctx, "POST", machine.path("/reissue"), body={"ttl": ttl})
    say(data["join"])
    say(f"{data['hostname']}: credential revoked; this join string binds a new one to the "
        f"same machine, once, until {day_and_time(data['credential']['reissue_expires_at'])}. "
        f"On {data['hostname']}: set `join:` in the agent's config to it, remove identity.json "
        "from its state dir, restart nodeagent", err=True)
