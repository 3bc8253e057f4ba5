"""`coordinator pivot --to URL`: this coordinator's state moved to another one, and its agents
told to follow, step by step (domain/transfer/pivot.py runs the steps; here each is done over HTTP).
Run again after any interruption, it resumes; `--abort` rolls back a pivot not done yet.

domain/transfer/pivot.py is imported only by the pivot commands that use it: it pulls pydantic in,
which every other command of the CLI would pay for at start-up (a third of its time)."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from coordinator.cli.client import AdminClient, ClientError
from coordinator.cli.formatting import day_and_time, moved_line
from coordinator.cli.plumbing import EXIT_ERROR, emit, fail, read_token, say
from nodeagent.wire import joinstring

if TYPE_CHECKING:
    from coordinator.domain.transfer import pivot as pv

ARCHIVE_TYPE = "application/gzip"
POLL_SECONDS = 2.0
WHAT = {  # by pv.Step's values
    "frozen": "the old coordinator refuses changes from now on",
    "copied": "its state imported into the new one",
    "announced": "agents told, through their assignment, to move to the new one",
    "done": "the old coordinator is a read-only copy, refreshed from the new one",
}


class PivotFailed(Exception):
    """A step cannot be done now; the message says what to do."""


class HttpSides:
    """The two coordinators of a pivot, over their admin APIs (domain/transfer/pivot.py's Sides)."""

    def __init__(self, old: AdminClient, new: AdminClient | None, token: str, ca_pem: str | None,
                 wait: float) -> None:
        self.old, self.new, self.token, self.ca_pem, self.wait = old, new, token, ca_pem, wait

    def _target(self) -> AdminClient:
        if self.new is None:
            raise PivotFailed("the new coordinator is needed: give --to and --to-token-file")
        return self.new

    def check(self, pivot_id: str | None) -> None:
        schema = self.old.get("/v1/pivot")["schema_version"]
        query = f"schema={schema}" + (f"&pivot={pivot_id}" if pivot_id else "")
        try:
            self._target().get(f"/v1/pivot/import?{query}")
        except ClientError as exc:
            why = (f"it refuses the token of --to-token-file ({exc}): give an admin token of "
                   "that coordinator (its DATA_DIR/admin.token)" if exc.status == 401 else exc)
            raise PivotFailed(f"{self._target().url} cannot take the state of {self.old.url}: "
                              f"{why}. Nothing was frozen: {self.old.url} takes changes as "
                              "before") from None

    def begin(self, to_url: str, ca_pem: str | None) -> pv.Pivot:
        from coordinator.domain.transfer import pivot as pv

        answer = self.old.request("POST", "/v1/pivot", {"to": to_url, "caPem": ca_pem,
                                                        "token": self.token})
        return pv.Pivot.from_json(answer["pivot"])

    def current(self) -> pv.Pivot | None:
        from coordinator.domain.transfer import pivot as pv

        found = self.old.get("/v1/pivot")["pivot"]
        return None if found is None else pv.Pivot.from_json(found)

    def record(self, pivot: pv.Pivot, step: pv.Step) -> pv.Pivot:
        from coordinator.domain.transfer import pivot as pv

        answer = self.old.request("POST", f"/v1/pivot/{pivot.id}/steps/{step.value}")
        return pv.Pivot.from_json(answer["pivot"])

    def copy(self, pivot: pv.Pivot) -> None:
        data = self.old.download("POST", f"/v1/pivot/{pivot.id}/snapshot", ARCHIVE_TYPE,
                                 lambda received: None)
        source = self.old.get("/v1/pivot")["url"]
        answer = self._target().request(
            "POST", f"/v1/pivot/import?pivot={pivot.id}&from={source}", text=data,
            content_type=ARCHIVE_TYPE)
        say(f"  {len(data) / 2**20:.1f} MiB " + ("imported" if answer["imported"] else
                                                  "already imported earlier"))

    def announce(self, pivot: pv.Pivot) -> None:
        pin = joinstring.ca_hash(pivot.ca_pem) if pivot.ca_pem else None
        self.old.request("PUT", "/v1/move-target", {"url": pivot.to_url, "caPin": pin})

    def settle(self, pivot: pv.Pivot) -> None:
        """Until every agent that responded has been heard from by the new coordinator since
        the announcement (or --wait runs out: they follow when they come back)."""
        deadline = time.monotonic() + self.wait
        shown = None
        while True:
            machines = self._target().all_machines()
            expected = [m for m in machines if m["responding"]]
            moved = [m for m in expected if m["last_seen"] >= pivot.updated_at]
            if (len(moved), len(expected)) != shown:
                shown = (len(moved), len(expected))
                say(f"  agents moved {len(moved)}/{len(expected)}")
            if len(moved) >= len(expected):
                return
            if time.monotonic() >= deadline:
                raise PivotFailed(
                    f"{len(expected) - len(moved)} agent(s) have not reached {pivot.to_url} in "
                    f"{self.wait:.0f} s (their hosts may be down: they move when they come "
                    "back). Run the command again to wait longer, or with --wait 0 to finish "
                    "without them")
            time.sleep(POLL_SECONDS)

    def withdraw(self, pivot: pv.Pivot) -> None:
        self.old.request("DELETE", "/v1/move-target")
        if self.new is None:
            say("  agents that already moved stay on the new coordinator (give --to and "
                "--to-token-file to bring them back)")
            return
        home = self.old.get("/v1/pivot")
        if home["ca_pem"] is None:  # --insecure-http: no agent is ever sent to plain HTTP
            say(f"  agents that already moved stay on the new coordinator: this one serves "
                f"plain HTTP, where no agent is sent; stop {pivot.to_url} and they come back "
                "after coordinator.fallbackSeconds")
            return
        self.new.request("PUT", "/v1/move-target", {"url": home["url"],
                                                     "caPin": joinstring.ca_hash(home["ca_pem"])})

    def rollback(self, pivot: pv.Pivot) -> None:
        self.old.request("DELETE", f"/v1/pivot/{pivot.id}")


def target_ca(value: str | None, url: str) -> str:
    """--to-ca: a CA certificate file (PEM), or its pin (sha256:HEX), checked against the CA
    the target serves at /v1/ca.crt. Required, and the target https: the old coordinator sends
    it an admin token and the agents their credentials, only over TLS verified against it."""
    from coordinator.domain.transfer import pivot as pv

    if (why := pv.not_https(url)) is not None:
        raise click.BadParameter(f"{why} (--to-ca FILE or sha256:PIN)", param_hint="--to")
    if value is None:
        raise click.BadParameter(f"required: {pv.HTTPS_ONLY} (a CA certificate file, or its "
                                 "sha256:PIN as its join strings carry it)",
                                 param_hint="--to-ca")
    if not value.startswith("sha256:"):
        try:
            pem = Path(value).read_text(errors="replace")  # not a PEM: said just below
        except OSError as exc:
            raise click.BadParameter(f"cannot read {value}: {exc.strerror}",
                                     param_hint="--to-ca") from None
        if (why := pv.not_a_certificate(pem)) is not None:
            raise click.BadParameter(f"{value}: {why}", param_hint="--to-ca")
        return pem
    import ssl
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the pin decides
    try:
        with urllib.request.urlopen(f"{url}/v1/ca.crt", context=context, timeout=30) as answer:
            pem = answer.read().decode()
    except OSError as exc:
        raise click.BadParameter(f"cannot fetch the CA of {url}: {exc}",
                                 param_hint="--to-ca") from None
    try:
        served = joinstring.ca_hash(pem)
    except ValueError:
        raise click.BadParameter(f"{url}/v1/ca.crt is not a PEM certificate: is it a "
                                 "coordinator?", param_hint="--to-ca") from None
    if served != value:
        raise click.BadParameter(f"the CA {url} serves is {served}, not {value}",
                                 param_hint="--to-ca")
    return pem


def _target_client(url: str, token: str, ca_pem: str) -> AdminClient:
    with tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False) as handle:
        handle.write(ca_pem)
    try:
        return AdminClient(url, token, ca_file=handle.name)
    finally:
        Path(handle.name).unlink()


def _steps_said(pivot: pv.Pivot, step: pv.Step) -> None:
    from coordinator.domain.transfer import pivot as pv

    number = pv.ORDER.index(step)
    say(f"[{number}/{len(pv.ORDER) - 1}] {step.value}: {WHAT[step]}")


def _attempt(action: Callable[[], pv.Pivot]) -> pv.Pivot:
    try:
        return action()
    except ClientError as exc:
        fail(exc)
    except PivotFailed as exc:
        say(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


@click.group(invoke_without_command=True)
@click.option("--to", "to_url", help="The new coordinator's URL (as agents reach it).")
@click.option("--to-token-file", type=click.Path(dir_okay=False),
              help="File holding an admin token of the new coordinator (kept sealed by the old "
                   "one, which refreshes its read-only copy with it).")
@click.option("--to-ca", help="The new coordinator's CA certificate file, or its pin "
                              "(sha256:HEX, as its join strings carry it).")
@click.option("--wait", default=600.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait for the agents to reach the new coordinator.")
@click.option("--abort", is_flag=True, help="Roll back the pivot under way (not once done).")
@click.pass_context
def pivot(ctx: click.Context, to_url: str | None, to_token_file: str | None,
          to_ca: str | None, wait: float, abort: bool) -> None:
    """Move this coordinator's state to another coordinator and its agents with it: freeze,
    copy, announce (agents move through their assignment; no SSH), done (this one becomes a
    read-only copy). Run it again after any interruption: it resumes from the step reached."""
    from coordinator.domain.transfer import pivot as pv

    if ctx.invoked_subcommand is not None:
        return
    token = read_token(None, to_token_file) or ""
    ca_pem = target_ca(to_ca, to_url.rstrip("/")) if to_url else None
    new = _target_client(to_url, token, ca_pem) if to_url and ca_pem and token else None
    sides = HttpSides(ctx.obj, new, token, ca_pem, wait)
    if abort:
        undone = _attempt(lambda: pv.abort(sides))
        say(f"pivot {undone.id} to {undone.to_url} rolled back from {undone.step.value}: this "
            "coordinator takes changes again and tells no agent to move")
        return
    if not to_url or not token:
        raise click.UsageError("give --to URL and --to-token-file (or --abort, or `pivot "
                               "status`)")
    done = _attempt(lambda: pv.run(sides, to_url, ca_pem, _steps_said))
    say(f"pivot {done.id} done: {to_url} holds the state and the agents; this coordinator is "
        "a read-only copy")


@pivot.command("status")
@click.option("--output", type=click.Choice(["text", "json", "yaml"]), default="text")
@click.pass_context
def pivot_status(ctx: click.Context, output: str) -> None:
    """The pivot this coordinator is in, and its step."""
    from coordinator.domain.transfer import pivot as pv

    client: AdminClient = ctx.obj
    try:
        answer: dict[str, Any] = client.get("/v1/pivot")
    except ClientError as exc:
        fail(exc)
    if emit(answer, output):
        return
    found = answer["pivot"]
    if found is None:
        say("no pivot: this coordinator holds its own state")
        return
    current = pv.Pivot.from_json(found)
    say(f"pivot {current.id} to {current.to_url}: {current.step.value} since "
        f"{day_and_time(current.updated_at)}")
    if current.done:
        say(moved_line(found))

