"""`coordinator events`: the event history, filtered, and followed live."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import click

from coordinator.cli.formatting import event_line
from coordinator.cli.plumbing import (
    MachineRef,
    complete_clusters,
    complete_machines,
    emit_record,
    event_history,
    follow_events,
    history_id,
    interrupt_quietly,
    output_option,
    say,
)

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


@click.command()
@click.option("--cluster", "cluster_name", shell_complete=complete_clusters)
@click.option("--machine", help="Hostname or id; a deleted machine's too (the last deleted of "
              "that hostname, unless its id is given).", shell_complete=complete_machines)
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
        query["machine"] = history_id(ctx, MachineRef(machine, cluster_name))
    if kinds:
        query["kind"] = ",".join(kinds)
    if since:
        query["since"] = parse_since(since, time.time())

    def show(event: dict[str, Any]) -> None:
        if output != "table":
            emit_record(event, output)
        else:
            say(event_line(event))

    after = 0
    for event in event_history(ctx, query, None):
        show(event)
        after = event["id"]
    if follow:
        with interrupt_quietly():
            follow_events(ctx, query, after, show)
