"""Cluster status for a terminal, drawn with rich: stages, the rollout's bar and ETA, and a
progress bar per machine. Input is the JSON the status endpoint serves, so the CLI shows
exactly what the API and the dashboard show. Apart from formatting.py so that only `status`
pays for importing rich (about as long as the rest of the CLI's start-up).

Data never reaches rich as a str: every cell is a Text of its escaped value (`cell`), so
neither markup (`[link=...]`), emoji codes nor control characters in a name take effect, and
the console itself interprets none of them."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from coordinator.cli.formatting import clock, day_and_time, duration, terminal_safe

STAGE_STYLE = {"done": ("✓", "green"), "in-progress": ("…", "cyan"),
               "failing": ("✗", "bold red"), "waiting": ("·", "dim")}
STATE_STYLE = {"Ready": "green", "Pending": "yellow", "Deleting": "magenta"}


def status_console() -> Console:
    """A console that takes no text for markup, emoji codes or highlighting."""
    console = Console(markup=False, emoji=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a pipe or file gets whole lines
    return console


def cell(text: str, style: str = "") -> Text:
    """A table cell or line showing text as it is: escaped, never read as markup."""
    return Text(terminal_safe(text), style=style)


def _note(note: dict[str, Any]) -> Text:
    """The machine's note (red when it fails) and, on a line of its own, its remedy."""
    text = cell(note.get("text", ""), "red" if note.get("failing") else "")
    if note.get("remedy"):
        text.append_text(Text.assemble("\n→ ", cell(note["remedy"])))
    return text


def status_renderable(data: dict[str, Any]) -> RenderableType:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(data["counts"].items())) or "no machines"
    header = Text.assemble(cell(f"cluster {data['cluster']}", "bold"),
                           cell(f"  release {data['release']}  generation {data['generation']}  "
                                f"{counts}"))

    stages = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("STAGE", "STATE", "SINCE", "MESSAGE"):
        stages.add_column(column, overflow="fold" if column == "MESSAGE" else "ellipsis",
                          no_wrap=column != "MESSAGE")
    for stage in data["stages"]:
        mark, style = STAGE_STYLE[stage["state"]]
        stages.add_row(cell(f"{mark} {stage['title']}", style), cell(stage["state"], style),
                       cell(clock(stage["since"])), cell(stage["message"]))

    rollout = data["rollout"]
    total = rollout["total"]
    bar = Table.grid(padding=(0, 1))
    eta = rollout["eta_seconds"]
    eta_text = (f"none, {rollout['held']}" if rollout.get("held") else "done" if eta == 0
                else "estimating" if eta is None else duration(eta))
    bar.add_row(Text("rollout", style="bold"),
                ProgressBar(total=max(total, 1), completed=rollout["done"], width=40),
                cell(f"{rollout['done']}/{total} items on {rollout['machines']} "
                     f"machine{'' if rollout['machines'] == 1 else 's'}"),
                Text(f"ETA {eta_text}", style="bold"))

    machines = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("HOSTNAME", "IP", "ROLE", "STATE", "ITEMS", "", "ITEM", "ATTEMPT", "ELAPSED",
                   "NOTE"):
        machines.add_column(column, no_wrap=column != "NOTE", overflow="fold")
    for m in data["machines"]:
        step = m.get("step") or {}
        total_items = step.get("total", 0)
        progress: RenderableType = (ProgressBar(total=total_items, completed=step["done"], width=12)
                                    if step.get("phase") and total_items else Text(""))
        item = step.get("item") or "-"  # named: ITEMS beside it counts the done ones
        elapsed = step.get("item_elapsed") if step.get("status") == "running" else None
        machines.add_row(
            cell(m["hostname"]), cell(m["ip"] or "-"), cell(m["role"] or "-"),
            cell(m["state"], STATE_STYLE.get(m["state"], "cyan")),
            cell(f"{step.get('done', 0)}/{total_items}" if step.get("phase") else "-"),
            progress, cell(item), cell(str(step["attempt"]) if step.get("attempt") else "-"),
            cell(duration(elapsed if elapsed is not None else step.get("state_elapsed"))),
            _note(m.get("note") or {}))
    parts: list[RenderableType] = [header, Text(""), stages, Text(""), bar, Text(""), machines]
    total = data.get("machines_total", len(data["machines"]))
    if total > len(data["machines"]):
        parts.append(cell(f"the first {len(data['machines'])} of {total} machines: "
                          f"`coordinator machines --cluster {data['cluster']}` pages through "
                          "them all", "dim"))
    post = data["post_deploy"]
    if post["failing"]:
        parts += [Text(""), cell(f"post-deploy step: {post['failing']}", "bold red")]
    elif post["running_on"]:
        parts += [Text(""), cell(f"post-deploy step: running on {post['running_on']}")]
    if data.get("held"):
        parts += [Text(""), _note({"text": "held: approved and claimed machines wait in Pending",
                                   "remedy": f"coordinator cluster provision {data['cluster']}"})]
    if data.get("pool"):
        roles = ", ".join(f"{r['held']}/{r['wanted']} {r['role']}s" for r in data["pool"]["roles"])
        parts += [Text(""), cell(f"claimed from the pool: {roles}")]
        parts += [_note({"text": note, "failing": True}) for note in data["pool"]["notes"]]
    if data.get("certificates"):
        parts += [Text(""), _certificates(data["certificates"])]
    return Group(*parts)


def _certificates(certs: dict[str, Any]) -> Text:
    """The client certificate's expiry and the API server's; a warning in red and the remedy
    on a line of its own."""
    if certs["warning"]:
        return _note({"text": f"certificates: {certs['warning']}", "failing": True,
                      "remedy": certs["remedy"]})
    if certs["problem"]:
        text = cell(f"certificates ({certs['source']}): {certs['problem']}", "dim")
    else:
        text = cell(f"certificates: the coordinator's client certificate ({certs['source']}, "
                    f"{certs['subject']}) expires at {day_and_time(certs['not_after'])}")
    serving = certs.get("serving")
    if serving and serving["problem"]:
        text.append_text(cell(f"\nthe API server's serving certificate ({serving['server']}): "
                              f"{serving['problem']}", "dim"))
    elif serving:
        text.append_text(cell(f"\nthe API server's serving certificate ({serving['server']}, "
                              f"{serving['subject']}) expires at "
                              f"{day_and_time(serving['not_after'])}"))
    return text
