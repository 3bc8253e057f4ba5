"""`coordinator backup`: a running coordinator's state, over the admin API, into one archive,
written only once its every checksum holds (`coordinator restore`, in process.py, reads it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from coordinator.cli.client import ClientError
from coordinator.cli.plumbing import EXIT_ERROR, fail, row_counts, say

ARCHIVE_TYPE = "application/gzip"
PROGRESS_SECONDS = 1.0


class DownloadMeter:
    """Bytes received so far, on stderr about once a second: a large backup takes a while."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.shown = self.started

    def __call__(self, received: int) -> None:
        now = time.monotonic()
        if now - self.shown >= PROGRESS_SECONDS:
            self.shown = now
            say(f"received {received / 2**20:.1f} MiB in {now - self.started:.0f} s", err=True)


@click.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False, writable=True),
              help="The archive to write (mode 0600; replaced whole once complete).")
@click.pass_context
def backup(ctx: click.Context, out: str) -> None:
    """Take a consistent backup of the running coordinator: clusters, machines, tokens (as
    hashes), outputs (sealed), events, the PKI and the secrets key, in one archive. It holds
    the CA's key and the secrets key: keep it as safe as the data dir. Needs an admin token
    (read-only ones are refused)."""
    from coordinator.service import snapshot  # the archive's checks, only for this command

    progress = DownloadMeter()
    try:
        data = ctx.obj.download("POST", "/v1/backup", ARCHIVE_TYPE, progress)
    except ClientError as exc:
        fail(exc)
    try:
        taken = snapshot.from_bytes(data, "the coordinator's answer")
        snapshot.save(data, Path(out))
    except (snapshot.ArchiveError, OSError) as exc:
        say(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    say(f"{out}: {len(data)} bytes in {time.monotonic() - progress.started:.1f} s, "
        f"schema {snapshot.SCHEMA_VERSION}, from {taken.source}: {row_counts(taken.counts())}")
