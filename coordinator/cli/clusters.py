"""`coordinator cluster apply|get|delete|render|etcd-snapshots|etcd-snapshot`: declaring
clusters, reading them back, seeing what their machines would run, and the etcd snapshots the
coordinator keeps of them."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import click

from coordinator.cli.backup import DownloadMeter
from coordinator.cli.client import ClientError
from coordinator.cli.formatting import (
    clusters_lines,
    day_and_time,
    etcd_snapshots_lines,
    rendering_lines,
)
from coordinator.cli.plumbing import (
    allow_downgrade_option,
    call,
    complete_clusters,
    confirm,
    downgrade_query,
    echo_lines,
    emit,
    fail,
    output_option,
    say,
    yes_option,
)
from nodeagent.wire.contract import PHASES


@click.group()
def cluster() -> None:
    """Declare and inspect clusters."""


@cluster.command("apply")
@click.option("-f", "--file", "path", required=True, type=click.File("r"),
              help="Cluster spec (YAML or JSON); - for stdin.")
@allow_downgrade_option
@click.pass_context
def cluster_apply(ctx: click.Context, path: Any, allow_downgrade: bool) -> None:
    """Create or update a cluster. Nothing is stored when the spec has any problem, nor
    when its settings.kubernetes.version skips a minor, goes down (unless
    --allow-downgrade) or changes without a new release."""
    text = path.read()
    result = call(ctx, "PUT", "/v1/clusters" + downgrade_query(allow_downgrade), text=text,
                  content_type="application/yaml")
    say(f"cluster {result['name']} {result['outcome']}: release {result['release']}, "
        f"generation {result['generation']}")
    pause = pause_note(result["name"], result.get("was_paused"),
                       result["spec"]["settings"]["upgrade"]["paused"])
    if pause:
        say(pause)
    for warning in result["warnings"]:
        say(f"warning: {warning}", err=True)


def pause_note(name: str, was_paused: bool | None, paused: bool) -> str | None:
    """What an apply did to a pause, said whenever upgrades are held: a paused cluster whose
    new release does not roll out must not look like one that does."""
    if paused:
        how = "paused by this file" if was_paused is False else "still paused"
        return (f"upgrades {how}: no machine starts upgrading until "
                f"`coordinator upgrade resume {name}`")
    if was_paused:
        return "upgrades resumed: this file says settings.upgrade.paused: false"
    return None


@cluster.command("get")
@click.argument("name", required=False, shell_complete=complete_clusters)
@output_option
@click.pass_context
def cluster_get(ctx: click.Context, name: str | None, output: str) -> None:
    """Show one cluster, or list them all."""
    data = call(ctx, "GET", f"/v1/clusters/{name}" if name else "/v1/clusters")
    if not emit(data, output):
        echo_lines(clusters_lines(data if isinstance(data, list) else [data]))


@cluster.command("delete")
@click.argument("name", shell_complete=complete_clusters)
@yes_option
@click.pass_context
def cluster_delete(ctx: click.Context, name: str, yes: bool) -> None:
    """Reset every machine of the cluster, then remove it. Asks first (--yes: does not)."""
    call(ctx, "GET", f"/v1/clusters/{quote(name, safe='')}")  # an unknown one: said at once
    count = call(ctx, "GET", "/v1/machines?" + urlencode({"cluster": name, "limit": 1}))["total"]
    confirm(f"Delete cluster {name}? Its {count} machine{'s' if count != 1 else ''} run their "
            "reset items and leave; its Kubernetes cluster is gone for good.", yes)
    call(ctx, "DELETE", f"/v1/clusters/{name}")
    say(f"cluster {name}: machines are resetting; it goes when they are done")


@cluster.command("provision")
@click.argument("name", shell_complete=complete_clusters)
@click.pass_context
def cluster_provision(ctx: click.Context, name: str) -> None:
    """Start a cluster held by settings.provision.held: its approved and claimed machines
    leave Pending and are prepared, deployed and made Ready."""
    data = call(ctx, "POST", f"/v1/clusters/{quote(name, safe='')}/provision")
    say(f"cluster {name}: provisioned, its machines start" if data["provisioned"] else
        f"cluster {name} is not held (settings.provision.held is false): nothing to do")


def _fleet(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Checked here too, so that a typo is the option's error before anything is sent."""
    from coordinator.domain.views.fleet import parse_fleet

    if value is not None:
        try:
            parse_fleet(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


@cluster.command("render")
@click.argument("name", shell_complete=complete_clusters)
@click.option("--machine", help="Only this machine (hostname or id).")
@click.option("--phase", type=click.Choice(PHASES), help="Only this phase.")
@click.option("--fleet", metavar="MANAGERS,WORKERS", callback=_fleet,
              help="A hypothetical fleet (e.g. 3,50) instead of the cluster's machines.")
@click.option("-f", "--file", "path", type=click.File("r"),
              help="A spec to render instead of the stored one; nothing is stored.")
@click.option("--output", "-o", type=click.Choice(["text", "json", "yaml"]), default="text",
              show_default=True, help="text for people (machines alike shown once); json or "
              "yaml: every machine.")
@click.pass_context
def cluster_render(ctx: click.Context, name: str, machine: str | None, phase: str | None,
                   fleet: str | None, path: Any, output: str) -> None:
    """Show what each machine would run: per phase, each item's action with its values
    filled in, secrets masked. Nothing runs and nothing is stored."""
    asked = {k: v for k, v in (("machine", machine), ("phase", phase), ("fleet", fleet)) if v}
    where = f"/v1/clusters/{name}/render" + (f"?{urlencode(asked)}" if asked else "")
    data = (call(ctx, "POST", where, text=path.read(), content_type="application/yaml") if path
            else call(ctx, "GET", where))
    if not emit(data, output):
        echo_lines(rendering_lines(data))


@cluster.command("etcd-snapshots")
@click.argument("name", shell_complete=complete_clusters)
@output_option
@click.pass_context
def cluster_etcd_snapshots(ctx: click.Context, name: str, output: str) -> None:
    """List the etcd snapshots the coordinator keeps of the cluster, newest first: one taken
    before each manager's upgrade and removal (settings.etcdSnapshots)."""
    data = call(ctx, "GET", f"/v1/clusters/{quote(name, safe='')}/etcd-snapshots")
    if not emit(data, output):
        echo_lines(etcd_snapshots_lines(data) if data else [
            f"cluster {name} has no etcd snapshot yet: one is taken before each manager's "
            "upgrade and removal (docs/kubernetes.md, \"etcd snapshots\")"])


@cluster.command("etcd-snapshot")
@click.argument("name", shell_complete=complete_clusters)
@click.argument("snapshot_id", metavar="[ID]", required=False)
@click.option("--out", required=True, type=click.Path(dir_okay=False, writable=True),
              help="The file to write (mode 0600; written only once its SHA-256 holds).")
@click.pass_context
def cluster_etcd_snapshot(ctx: click.Context, name: str, snapshot_id: str | None,
                          out: str) -> None:
    """Download an etcd snapshot of the cluster (the newest unless ID), to restore etcd from
    (docs/kubernetes.md, "Restoring etcd from a snapshot"). It holds every Secret of the
    cluster: keep it as safe as a backup. Needs an admin token (read-only ones are refused)."""
    from coordinator.service.privatefiles import saving  # only for this command
    listed = call(ctx, "GET", f"/v1/clusters/{quote(name, safe='')}/etcd-snapshots")
    chosen = next((s for s in listed if snapshot_id in (None, s["id"])), None)
    if chosen is None:
        fail(ClientError(404, f"cluster {name} has no etcd snapshot {snapshot_id}" if snapshot_id
                         else f"cluster {name} has no etcd snapshot yet"))
    path = f"/v1/clusters/{quote(name, safe='')}/etcd-snapshots/{quote(chosen['id'])}/download"
    try:
        with saving(Path(out)) as handle:
            digest = hashlib.sha256()

            def write(data: bytes) -> None:
                digest.update(data)
                handle.write(data)

            ctx.obj.download_into("POST", path, "application/octet-stream", DownloadMeter(),
                                  write)
            if digest.hexdigest() != chosen["sha256"]:
                raise ClientError(0, f"the snapshot that came has SHA-256 {digest.hexdigest()}, "
                                  f"not {chosen['sha256']}: {out} was not written; download "
                                  "it again")
    except ClientError as exc:
        fail(exc)
    except OSError as exc:
        fail(ClientError(0, f"cannot write {out}: {exc.strerror or exc}"))
    say(f"{out}: etcd snapshot {chosen['id']} of cluster {name}, {chosen['size']} bytes, "
        f"sha256 {chosen['sha256']}, taken {day_and_time(chosen['taken_at'])} by "
        f"{chosen['item']} on {chosen['hostname']}")
