"""The CLI's plain texts: short durations and times, why a machine is where it is, and the
tables commands print. Pure functions of the API's JSON, shared by the plain output, the rich
status view (console.py) and the demo script. Also the one escaping of what reaches a terminal
(`terminal_safe`): names, errors and logs come from nodes, and nodes may be hostile."""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

from coordinator.domain.durations import duration

# C0, DEL and C1 controls; the Unicode line and paragraph separators; the bidirectional
# embeddings, overrides and isolates, which make a text display as another.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def terminal_safe(text: str) -> str:
    """text with every control character written out (\\n, \\t, \\x1b, \\u202e...), so that
    data can neither drive the terminal (clear the screen, set the window title) nor start a
    line of its own in a table."""
    return CONTROL.sub(_written_out, text)


def _written_out(match: re.Match[str]) -> str:
    code = ord(match[0])
    return NAMED.get(match[0]) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def block_lines(text: str) -> list[str]:
    """A multi-line text (an item's output, a file's content) as its lines, split on newlines
    only: each line is then shown escaped like any other."""
    return text.removesuffix("\n").split("\n")


def clock(timestamp: float | None) -> str:
    return "-" if timestamp is None else time.strftime("%H:%M:%S", time.localtime(timestamp))


def day_and_time(stamp: float | None, never: str = "never") -> str:
    return never if stamp is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


def moved_line(moved: dict[str, Any]) -> str:
    """What `status` and `pivot status` say of a coordinator that moved (its pivot's view)."""
    return (f"moved to {moved['to_url']} at {day_and_time(moved['updated_at'])}; this is a "
            "read-only copy refreshed " + ("not yet" if moved.get("refreshed_at") is None else
                                           f"at {day_and_time(moved['refreshed_at'])}"))


def machine_note(machine: dict[str, Any]) -> str:
    """Why a machine is where it is, and what to do about it, as the API decided
    (domain/rollout/remedies.py): the same words in every view."""
    note = machine.get("note") or {}
    return "; ".join(part for part in (note.get("text", ""), note.get("remedy", "")) if part)


def machine_progress(machine: dict[str, Any]) -> str:
    """The PROGRESS cell: the running or failing item, then the machine's note."""
    step = machine.get("step") or {}
    text = machine_note(machine)
    if step.get("status") == "running":  # named, not numbered: ITEMS beside it counts done
        text = (f"{step['item']} running (attempt {step['attempt']}, "
                f"{duration(step['item_elapsed'])}) {text}")
    elif step.get("status") == "failed" and not step.get("node"):  # a note given up counts them
        text = f"{step['item']}: {text}" if step.get("gave_up") else \
            f"{step['item']} attempt {step['attempt']} {text}"
    return text.rstrip()


def labels_text(labels: dict[str, str]) -> str:
    """k=v,k2=v2 by key, as kubectl shows them."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def machines_table(machines: list[dict[str, Any]], show_labels: bool = False) -> list[str]:
    """One line per machine; with show_labels, a LABELS column before PROGRESS. ITEMS is the
    phase's items done of its total; PROGRESS names the item at work (no second count)."""
    labels = [labels_text(m.get("labels") or {}) or "-" for m in machines]
    width = max([len("LABELS"), *map(len, labels)])
    column = f"{'LABELS':<{width}} " if show_labels else ""
    lines = [f"{'HOSTNAME':<20} {'IP':<16} {'ROLE':<8} {'STATE':<12} {'ITEMS':<7} {column}"
             "PROGRESS"]
    for m, text in zip(machines, labels, strict=True):
        step = m.get("step") or {}
        items = f"{step['done']}/{step['total']}" if step.get("phase") else "-"
        column = f"{text:<{width}} " if show_labels else ""
        lines.append(f"{m['hostname']:<20} {m['ip'] or '-':<16} {m['role'] or '-':<8} "
                     f"{m['state']:<12} {items:<7} {column}{machine_progress(m)}".rstrip())
    return lines


def machine_details(machine: dict[str, Any]) -> list[str]:
    """What `machines get` adds under the table: labels, its Kubernetes Node, the cluster
    address and the interfaces it was chosen from, the node's disks."""
    facts = machine.get("facts") or {}
    interfaces = ", ".join(
        f"{i['name']} " + " ".join(a["address"] for a in i.get("addresses") or [])
        for i in facts.get("interfaces") or []
        if isinstance(i, dict) and i.get("name") and i.get("name") != "lo")
    on = f" on {machine['interface']}" if machine.get("interface") else ""
    lines = [f"labels     {labels_text(machine.get('labels') or {}) or '-'}",
             f"node       {_node(machine.get('node'))}",
             f"address    {machine['ip'] or '-'}{on}  (interfaces: {interfaces or '-'})",
             "devices    " + ("" if facts.get("block_devices") else "-")]
    lines += [f"  /dev/{d['name']:<10} {_size(d.get('size_bytes'))} "
              f"{'hdd' if d.get('rotational') else 'ssd'}{' removable' if d.get('removable') else ''}"
              f"  {d.get('model') or ''}  {_use(d)}".rstrip()
              for d in facts.get("block_devices") or []]
    return lines


def machine_full(machine: dict[str, Any]) -> list[str]:
    """`machines get`: one machine in full, a key and its value a line: who and where it is,
    its state and why, its prechecks, each item of its phase and where it stands, then
    machine_details (labels, Node, address, disks)."""
    step = machine.get("step") or {}
    credential = machine["credential"]
    items = machine.get("phase_items") or []
    applied = sum(i["status"] == "applied" for i in items)
    lines = [
        f"hostname   {machine['hostname']}",
        f"id         {machine['id']}",
        f"cluster    {machine['cluster']}",
        f"role       {machine['role'] or '-'}",
        f"state      {machine['state']} for {duration(step.get('state_elapsed'))} (since "
        f"{day_and_time(machine['state_since'])})",
        f"release    {machine['release'] or '-'}",
        f"approved   {'yes' if machine['approved'] else 'no'}",
        f"responding {'yes' if machine['responding'] else 'NO'}, last seen "
        f"{day_and_time(machine['last_seen'])}",
        "credential " + ("revoked" if credential["revoked"] else
                         f"expires {day_and_time(credential['expires_at'])}"),
        f"progress   {machine_progress(machine) or '-'}",
        "prechecks  " + ("failed: " + "; ".join(machine["precheck_failures"])
                         if machine["precheck_failures"] else "passed") + (
            "; to be set by Prepare: " + "; ".join(machine["precheck_to_be_prepared"])
            if machine.get("precheck_to_be_prepared") else ""),
        "items      " + (f"{step['phase']}: {applied} of {len(items)} applied"
                         if step.get("phase") else "-"),
    ]
    lines += [f"  {i['name']:<24} {i['status']}"
              + (f" (attempt {i['attempt']})" if i["attempt"] else "") for i in items]
    return lines + machine_details(machine)


def _node(node: dict[str, Any] | None) -> str:
    """The machine's Kubernetes Node as last found: its name and Ready condition."""
    if node is None:
        return "-"
    found = ("not registered yet" if not node["name"] else f"{node['name']} "
             + ("Ready" if node["ready"] else f"not Ready: {node['condition_text']}"))
    return found + (f" (cannot look: {node['error']})" if node.get("error") else "")


def _size(size: int | None) -> str:
    return "?" if size is None else f"{size / 2**30:>8.1f} GiB"


def _use(device: dict[str, Any]) -> str:
    if not device.get("in_use"):
        return "unused"
    return "in use: " + ", ".join([*device.get("mounts", []), *device.get("holders", [])])


def clusters_lines(clusters: list[dict[str, Any]]) -> list[str]:
    return [f"{item['name']:<24} release {item['release']:<12} generation {item['generation']}"
            + (" (deleting)" if item["deleting"] else "") for item in clusters]


def join_tokens_lines(tokens: list[dict[str, Any]]) -> list[str]:
    """STATUS is the coordinator's word (active, used up, expired, revoked): by its clock."""
    lines = [f"{'ID':<14}{'CLUSTER':<16}{'EXPIRES':<18}{'USES':<10}STATUS"]
    for t in tokens:
        uses = f"{t['uses']}/{t['max_uses'] or '-'}"
        into = t["cluster"] or ("(pool, approves)" if t.get("auto_approve") else "(pool)")
        lines.append(f"{t['id']:<14}{terminal_safe(into):<16}{day_and_time(t['expires_at']):<18}"
                     f"{uses:<10}{t['state']}")
    return lines


def etcd_snapshots_lines(snapshots: list[dict[str, Any]]) -> list[str]:
    """Newest first: which step each was taken before, by whom, its size and sum."""
    lines = [f"{'ID':<18}{'TAKEN':<18}{'BEFORE':<40}{'SIZE':>11}  SHA256"]
    for s in snapshots:
        before = (f"{s['subject']}'s upgrade to {s['release']}" if s["before"] == "upgrade"
                  else f"{s['subject']}'s removal")
        lines.append(f"{s['id']:<18}{day_and_time(s['taken_at']):<18}{before:<40}"
                     f"{s['size'] / 2**20:>7.1f} MiB  {s['sha256'][:16]}…  "
                     f"({s['item']} on {s['hostname']})")
    return lines


def admin_tokens_lines(tokens: list[dict[str, Any]]) -> list[str]:
    return [f"{'ID':<14}{'NAME':<24}{'ROLE':<12}STATUS"] + [
        f"{t['id']:<14}{t['name']:<24}{t['role']:<12}{'revoked' if t['revoked'] else 'active'}"
        for t in tokens]


def upgrade_plan_lines(plan: dict[str, Any]) -> list[str]:
    """The dry run as text: each step's machines, one a line, with the items each runs."""
    note = " (paused: resume to start)" if plan["paused"] else ""
    lines = [f"upgrade of {plan['cluster']} to release {plan['release']}{note}"]
    if not plan["steps"] and not plan["waiting"]:
        lines.append("nothing to upgrade")
    for number, step in enumerate(plan["steps"], 1):
        label = f"step {number}: "
        for index, m in enumerate(step):
            lines.append(f"{label if index == 0 else ' ' * len(label)}{_planned(m)} runs "
                         f"{_items(m)}")
            lines += [f"{' ' * len(label)}  {line}" for line in _drain_lines(m.get("drain"))]
    lines += [f"not reached: {_planned(m)}: {m['reason']}; would run {_items(m)}"
              for m in plan["waiting"]]
    if plan["nothing_to_run"]:
        lines.append(f"nothing to run, recorded at {plan['release']}: "
                     + ", ".join(_planned(m) for m in plan["nothing_to_run"]))
    return lines + [f"note: {note}" for note in plan.get("notes", [])] \
        + [f"warning: {warning}" for warning in plan.get("warnings", [])]


def _drain_lines(drain: dict[str, Any] | None) -> list[str]:
    """A planned machine's drain forecast, under its line: what it evicts, then each thing
    that blocks or slows it with its remedy."""
    if drain is None:
        return []
    evicted = len(drain["evicted"])
    lines = [f"drain of node {drain['node']}: evicts {evicted} pod{'s' if evicted != 1 else ''}"
             + (": " + ", ".join(drain["evicted"][:5]) + (" ..." if evicted > 5 else "")
                if evicted else "")]
    return lines + [f"{h['severity']}: {h['what']}; remedy: {h['remedy']}"
                    for h in drain["hindrances"]]


def _planned(machine: dict[str, Any]) -> str:
    return f"{machine['hostname']} ({machine['role']}, from {machine['from'] or '-'})"


def _items(machine: dict[str, Any]) -> str:
    return ", ".join(f"{i['phase']}/{i['name']}" for i in machine["items"])


def item_header(event: dict[str, Any]) -> str:
    """The line above an item report's output: when, where, which attempt, how it ended, and
    whether an upgrade ran it (a prepare or deploy item that changed)."""
    data = event["data"]
    rerun = " (in the upgrade)" if data.get("state") == "Upgrade" and data["phase"] != "upgrade" else ""
    head = (f"── {clock(event['time'])} {event['hostname']} {data['phase']}/{data['item']}{rerun} "
            f"attempt {data['attempt']} {data['status']}")
    if data["status"] != "running":
        exit_code = "" if data.get("exit_code") is None else f"exit {data['exit_code']}, "
        head += f" ({exit_code}{duration(data.get('duration'))})"
    if data.get("error"):
        head += f": {data['error']}"
    return head


def event_line(event: dict[str, Any]) -> str:
    return (f"{clock(event['time'])} {event['cluster']:<12} "
            f"{event['hostname'] or '-':<16} {event['kind']:<14} {event['message']}")


def rendering_lines(rendering: dict[str, Any]) -> list[str]:
    """What machines would run, as text: each machine's phases and items, every argument and
    template filled in. A machine with the same role, state and items as one shown before is
    not shown again: it is listed at the end as like that one, but for its values."""
    fleet = rendering["fleet"]
    on = (f"a hypothetical fleet of {_count(fleet['managers'], 'manager')} and "
          f"{_count(fleet['workers'], 'worker')}, as if deployed at an earlier release"
          if fleet else "its machines")
    lines = [f"cluster {rendering['cluster']}, release {rendering['release']}, on {on}"]
    alike: dict[tuple[Any, ...], list[str]] = {}
    for machine in rendering["machines"]:
        shape = (machine["role"], machine["state"], tuple(
            (p["phase"], tuple((i["name"], i["version"]) for i in p["items"]))
            for p in machine["phases"]))
        alike.setdefault(shape, []).append(machine["hostname"])
        if len(alike[shape]) == 1:
            lines += _rendered_machine(machine)
    for first, *others in alike.values():
        if others:
            names = ", ".join(others) if len(others) <= 3 else f"{others[0]} … {others[-1]}"
            lines.append(f"{names} ({_count(len(others), 'machine')}): as {first}, but for "
                         "their values")
    if any(len(names) > 1 for names in alike.values()):
        lines.append("(--machine NAME or -o json shows each)")
    return lines + [f"note: {note}" for note in rendering.get("notes", [])]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _rendered_machine(machine: dict[str, Any]) -> list[str]:
    lines = [f"{machine['hostname']} ({machine['role'] or 'no role'}, {machine['state']}, "
             f"{machine['ip'] or 'no address'})"]
    if not machine["phases"]:
        lines.append("  nothing to run" if machine["role"] else
                     "  nothing until it is approved with a role")
    for phase in machine["phases"]:
        joiner = phase.get("for")
        lines.append(f"  {phase['phase']}" + (f" (for {joiner})" if joiner else ""))
        for item in phase["items"]:
            lines += _rendered_item(item, f"+{phase['phase']}." if joiner else None)
    return lines


def _rendered_item(item: dict[str, Any], job: str | None = None) -> list[str]:
    """An item's action, field by field; each text as the node gets it. job: the suffix a
    job's items are versioned with (runs.job_items: `+mint.JOINER.SERIAL`), not shown: the
    phase says whom the job is for."""
    action = item["action"]
    written = item["version"].rsplit(job, 1)[0] if job else item["version"]
    version = "" if written == "1" else f" (version {written})"
    kind = action["type"]
    fields: list[tuple[str, str]] = []
    if kind in ("exec", "version"):
        fields.append(("argv", shlex.join(action["argv"])))
        fields += [(f"env {name}", value) for name, value in action.get("env", {}).items()]
        fields += [("cwd", action["cwd"])] if "cwd" in action else []
        fields += [("expects", action["expect"])] if kind == "version" else []
        what = kind
    elif kind == "file":
        owner = f", owner {action['owner']}" if "owner" in action else ""
        what = f"file {action['path']}, mode {action['mode']}{owner}"
        fields.append(("template", action["template"]) if "template" in action
                      else ("content", action["content"]))
    else:
        what = (f"download {action.get('url') or 'artifact ' + action['artifact']} to "
                f"{action['path']}, mode {action['mode']}")
        fields.append(("sha256", action["sha256"]))
    lines = [f"    {item['name']}{version}: {what}"]
    for label, text in fields:
        lines += _field(label, text)
    return lines + [f"      problem: {problem}" for problem in item["problems"]]


def _field(label: str, text: str) -> list[str]:
    """label: text on one line, or text as a block under label when it has several."""
    lines = block_lines(text)
    if len(lines) == 1:
        return [f"      {label}: {lines[0]}"]
    return [f"      {label}:", *(f"        | {line}" for line in lines)]


def remediation_lines(plan: dict[str, Any]) -> list[str]:
    """A cluster's health policy dry run: off, or each unhealthy machine with why and when it
    is due, then what would be done now and what holds it back."""
    policy = plan["policy"]
    if policy["unhealthy_after_seconds"] is None:
        return [f"{plan['cluster']}: no health policy (settings.health.unhealthyAfterSeconds)"]
    lines = [f"{plan['cluster']}: unhealthy after {duration(policy['unhealthy_after_seconds'])}, "
             f"at most {policy['max_unhealthy']} at once; "
             f"{len(plan['unhealthy']) or 'no'} unhealthy"]
    lines += [f"  {terminal_safe(u['hostname'])} ({u['claim'] or 'not claimed'}): "
              f"{terminal_safe(u['why'])}; due {day_and_time(u['due_at'])}"
              for u in plan["unhealthy"]]
    lines += [f"  would now: {terminal_safe(a)}" for a in plan["actions"]]
    lines += [f"  held back: {terminal_safe(n)}" for n in plan["notes"]]
    return lines
