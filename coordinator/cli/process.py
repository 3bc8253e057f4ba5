"""`coordinator serve`, `init` and `restore`: the commands that run or set up a coordinator
on this host rather than talk to one. They import the server lazily, so that the admin
commands start fast."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from coordinator.cli.plumbing import (
    EXIT_ERROR,
    EXIT_USAGE,
    parse_duration,
    row_counts,
    say,
    say_block,
)
from coordinator.domain.transfer.archive import MAX_UNPACKED

data_dir_option = click.option(
    "--data-dir", default="coordinator-data", show_default=True, type=click.Path(file_okay=False),
    help="Database, TLS files (pki/), secrets key, admin token and artifacts.")
listen_option = click.option("--listen", default="127.0.0.1:8080", show_default=True,
                             help="HOST:PORT to serve on.")
store_option = click.option(
    "--store", envvar="COORDINATOR_STORE", show_envvar=True, metavar="DSN",
    help="Keep state in PostgreSQL (postgresql://USER@HOST:PORT/DATABASE; password from "
         "~/.pgpass or PGPASSWORD) so that several replicas can share it. Default: the embedded "
         "SQLite file DATA_DIR/coordinator.db.")
advertise_option = click.option(
    "--advertise-url", help="URL agents use to reach this coordinator; it goes into join strings "
                            "(default: from --listen).")


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("expected HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


def parse_store(location: str | None) -> str | None:
    from coordinator.server.serve import POSTGRES_SCHEMES

    if location is not None and not location.startswith(POSTGRES_SCHEMES):
        raise click.BadParameter("expected a postgresql://USER@HOST:PORT/DATABASE DSN",
                                 param_hint="--store")
    return location


@click.command()
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
@click.option("--register-rate-total", default=50.0, show_default=True,
              help="Registrations a second whose body is read, from all addresses together "
                   "(bursts of 100); 0: no limit.")
@click.option("--connections-per-address", default=1024, show_default=True,
              type=click.IntRange(min=0),
              help="Connections one client address (an IPv6 /64) may hold open; 0: no bound "
                   "(say, a large fleet behind one NAT address).")
@click.option("--header-timeout", default=10.0, show_default=True,
              type=click.FloatRange(min=0.1),
              help="Seconds a new connection has for its TLS handshake and first request's "
                   "headers before it is closed.")
@click.option("--idle-timeout", default=75.0, show_default=True,
              type=click.FloatRange(min=0.1),
              help="Seconds a kept-alive connection may wait idle, or for its next request's "
                   "headers, after its last answer before it is closed (keep it above the "
                   "agents' own 60 s).")
@click.option("--body-timeout", default=30.0, show_default=True,
              type=click.FloatRange(min=0.1),
              help="Seconds a request's body has from the end of its headers, and a second "
                   "more for each 64 KiB it sent, before it is answered 408.")
@click.option("--gc-interval", default=0.25, show_default=True, type=click.FloatRange(min=0),
              help="Seconds between the coordinator's own collections of cyclic garbage, which "
                   "replace CPython's long automatic ones (docs/coordinator.md); 0: CPython's.")
@click.option("--metrics-token-file", type=click.Path(dir_okay=False),
              help="File holding a token /metrics then asks for (Authorization: Bearer); "
                   "default: /metrics is open.")
@click.option("--event-retention", default="30d", show_default=True,
              help="Events older than this are deleted (pruned hourly).")
@click.option("--event-max", default=1_000_000, show_default=True,
              type=click.IntRange(min=1000), help="At most this many events are kept, the newest.")
@click.option("--pivot-refresh", default=60.0, show_default=True,
              type=click.FloatRange(min=1), help="Once this coordinator has moved (`coordinator "
              "pivot`), seconds between refreshes of its read-only copy from the new one.")
@click.option("--artifact-port", type=click.IntRange(min=1, max=65535),
              help="Also serve artifacts' bytes on this port (same host, same certificate), "
                   "encrypted in threads on every core: the API answers an artifact's GET "
                   "with a redirect there. Default: the API's port serves them itself.")
def serve(data_dir: str, listen: str, advertise_url: str | None, store: str | None,
          artifacts: str | None, insecure_http: bool, credential_ttl: str,
          register_rate: float, register_rate_total: float, connections_per_address: int,
          header_timeout: float, idle_timeout: float, body_timeout: float, gc_interval: float,
          metrics_token_file: str | None, event_retention: str, event_max: int,
          pivot_refresh: float, artifact_port: int | None) -> None:
    """Run the coordinator: HTTPS API plus the reconcile loop, on the embedded SQLite store or
    on PostgreSQL (--store), where several replicas serve the API and one leads."""
    from coordinator.server.listener import ConnectionLimits
    from coordinator.server.serve import ServeOptions, serve_forever
    from coordinator.service.history import Retention

    host, port = parse_listen(listen)
    serve_forever(ServeOptions(
        Path(data_dir), host, port, Path(artifacts) if artifacts else None,
        insecure_http=insecure_http, advertise_url=advertise_url,
        credential_ttl=parse_duration(credential_ttl, "--credential-ttl"),
        register_rate=register_rate, register_rate_total=register_rate_total,
        store=parse_store(store), gc_interval=gc_interval,
        connections=ConnectionLimits(per_address=connections_per_address,
                                     header_seconds=header_timeout,
                                     idle_seconds=idle_timeout,
                                     body_seconds=body_timeout),
        metrics_token_file=Path(metrics_token_file) if metrics_token_file else None,
        retention=Retention(max_age_seconds=retention_seconds(event_retention),
                            max_events=event_max), pivot_refresh_seconds=pivot_refresh,
        artifact_port=artifact_port))


@click.command("serve-artifacts", hidden=True)
def serve_artifacts() -> None:
    """The artifact port's process, which `serve --artifact-port` starts with its settings
    on stdin; never run by hand."""
    from coordinator.server.artifact_process import main

    main()


def retention_seconds(value: str) -> float:
    """--event-retention in seconds: a duration, never 0 (history is never kept for ever)."""
    seconds = parse_duration(value, "--event-retention")
    if seconds is None:
        raise click.BadParameter("0 would keep every event for ever: give a duration",
                                 param_hint="--event-retention")
    return seconds


@click.command()
@data_dir_option
@listen_option
@advertise_option
@store_option
@click.option("--name", "names", multiple=True, required=True,
              help="Host name or IP address agents and admins use to reach the coordinator "
                   "(repeatable); all go into the server certificate.")
@click.option("--cluster", "cluster_file", type=click.File("r"),
              help="A first cluster spec to apply; a join string for it is printed.")
@click.option("--join-ttl", default="24h", show_default=True,
              help="Lifetime of that join token (with --cluster).")
@click.option("--join-max-uses", type=click.IntRange(min=1),
              help="Registrations that join token allows (with --cluster; default: unlimited).")
def init(data_dir: str, listen: str, advertise_url: str | None, store: str | None,
         names: tuple[str, ...], cluster_file: Any, join_ttl: str,
         join_max_uses: int | None) -> None:
    """Create the CA, the server certificate, the secrets key and an admin token; with
    --cluster, also apply that first cluster and print a join string for it."""
    import asyncio

    from coordinator.domain.specs.specs import load_spec
    from coordinator.server.datadir import PRIVATE_UMASK
    from coordinator.server.init import initialize
    from coordinator.server.pki import PkiError
    from coordinator.server.serve import ServeOptions, SetupError
    from nodeagent.wire.validation import InvalidDocument

    spec = None
    if cluster_file is not None:
        try:
            spec = load_spec(cluster_file.read(), cluster_file.name)
        except InvalidDocument as exc:
            say_block(f"error: bad cluster spec\n{exc}", err=True)
            sys.exit(EXIT_USAGE)
    host, port = parse_listen(listen)
    os.umask(PRIVATE_UMASK)  # whatever the shell's: every file it makes is its own
    options = ServeOptions(Path(data_dir), host, port,
                           advertise_url=advertise_url or f"https://{names[0]}:{port}",
                           store=parse_store(store))
    try:
        done = asyncio.run(initialize(options, list(names), spec,
                                      parse_duration(join_ttl, "--join-ttl"), join_max_uses))
    except (PkiError, SetupError) as exc:
        say(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    say(f"CA certificate:  {options.pki().ca_cert}  ({done.ca_hash})")
    say(f"admin token:     {options.data_dir / 'admin.token'}")
    say(f"secrets key:     {options.key_file()}  (back it up with the database: without "
               "it the machines' secrets cannot be read)")
    say(serve_line(data_dir, listen, options.url(), store is not None))
    if done.join:
        say(f"join string for cluster {spec.name if spec else ''} (put it in each "
                   f"node's /etc/nodeagent/config.yaml as `join:`):\n{done.join}")
    else:
        say("no cluster yet: once it serves, `coordinator cluster apply -f SPEC`, then "
            "`coordinator join-token create NAME` prints a join string for it")


def serve_line(data_dir: str, listen: str, url: str, store: bool) -> str:
    """The `coordinator serve` that starts a coordinator set up here (by init or restore)."""
    return (f"start it with:   coordinator serve --data-dir {data_dir} --listen {listen} "
            f"--advertise-url {url}" + (" --store DSN" if store else ""))


def restored_serve_lines(data_dir: str, store: bool, url: str | None, names: list[str]) -> str:
    """How to serve a restored coordinator where its agents find it: at the URL the backup
    recorded (they hold it in their identity), or, from an older backup that does not, at the
    one its join strings named, which its server certificate must name too."""
    if url is not None:
        host, port = _host_and_port(url)
        return (serve_line(data_dir, f"ADDRESS:{port}", url, store) + "\n"
                f"                 (the URL its agents reach it at, as the backup recorded it; "
                f"ADDRESS: the address of this host that {host} resolves to, or 0.0.0.0)")
    named = (f"one of its server certificate's names ({', '.join(names)})" if names else
             "its host (it served plain HTTP)")
    scheme = "https" if names else "http"
    return (serve_line(data_dir, "ADDRESS:PORT", f"{scheme}://NAME:PORT", store) + "\n"
            "                 (this backup does not record the URL its agents reach it at: "
            f"give the one its join strings named, NAME {named}; ADDRESS: the address of "
            "this host that NAME resolves to, or 0.0.0.0)")


def _host_and_port(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or url, parts.port or (443 if parts.scheme == "https" else 80)


@click.command()
@click.argument("archive", type=click.Path(dir_okay=False))
@data_dir_option
@store_option
@click.option("--max-unpacked", metavar="MIB", default=MAX_UNPACKED >> 20, show_default=True,
              type=click.IntRange(min=1),
              help="Refuse a backup that unpacks to more than this many MiB: its rows are held "
                   "in memory until written.")
def restore(archive: str, data_dir: str, store: str | None, max_unpacked: int) -> None:
    """Rebuild a coordinator from a backup, offline, into a new data dir (and with --store an
    empty PostgreSQL database: the way to move a SQLite coordinator to replicas). Then
    `coordinator serve` with the same --data-dir and --store serves its clusters, machines,
    tokens and history; its agents reconnect as they were."""
    import asyncio

    from coordinator.server.datadir import PRIVATE_UMASK
    from coordinator.server.restore import restore_archive
    from coordinator.server.serve import SetupError

    os.umask(PRIVATE_UMASK)
    location = parse_store(store)
    try:
        taken = asyncio.run(restore_archive(Path(archive), Path(data_dir), location,
                                            max_unpacked << 20))
    except SetupError as exc:
        say(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(taken.created_at))
    say(f"restored {archive} (taken {when} from {taken.source}): {row_counts(taken.counts())}")
    from coordinator.server.pki import certificate_names

    cert = Path(data_dir) / "pki" / "server.crt"
    say_block(restored_serve_lines(data_dir, location is not None, taken.advertise_url,
                                   certificate_names(cert) if cert.is_file() else []))
    say("admin tokens:    those of the backup (admin.token is not in a backup)")
