"""The prechecks of a machine that is not approved yet: run before it registers, then again at
every start of its agent and with capped backoff for as long as the machine is Pending. So a
node fixed after it registered (or after its agent restarted) becomes approvable without
anyone's help, and one that breaks before its approval is not approved on an old report.

After Prepare the prechecks run again (--prepared), as kubeadm runs its preflight right before
init and join: the Kubernetes prerequisites the prepare items set must hold now, and the
coordinator admits the machine into Deploy only on such a report that passes. They run, and
are sent, with the same backoff while the machine stays in Prepare."""

from __future__ import annotations

import asyncio
import json
import logging
import random

from nodeagent import sdnotify
from nodeagent.backoff import delay
from nodeagent.children import DaemonSettings, checked_output
from nodeagent.client import CoordinatorClient, Document, Rejected, Unreachable
from nodeagent.host import Host
from nodeagent.identity import Identity

log = logging.getLogger("nodeagent")
# The first wait between two runs while they fail; the longest, what a node that passes waits
# as it has nothing urgent to say, is the config's precheckRecheckSeconds (default 60).
RECHECK_FIRST_SECONDS = 5.0


class Prechecks:
    def __init__(self, settings: DaemonSettings, host: Host, config_path: str,
                 client: CoordinatorClient, rand: random.Random) -> None:
        self.settings = settings
        self.host = host
        self.config_path = config_path
        self.client = client
        self.rand = rand
        # The cluster's NTP settings (as the assignment spells them), once an assignment has
        # told them: prechecks use them when this node's config names no NTP servers.
        self.cluster_ntp: Document | None = None
        self.checked_ntp: Document | None = None  # what the last run used
        self._rechecking: asyncio.Task[None] | None = None
        self._after_prepare = False  # whether _rechecking runs the checks after Prepare

    async def run(self, prepared: bool = False) -> Document:
        """One run of the prechecks: a PrecheckReport, as JSON; prepared: the run after the
        cluster's prepare items (its Kubernetes prerequisites hard)."""
        args = ["precheck", "--output", "json", "--role", self.settings.role,
                "--config", self.config_path, *(["--prepared"] if prepared else [])]
        if self.settings.ignore_prechecks:
            args += ["--ignore", ",".join(self.settings.ignore_prechecks)]
        self.checked_ntp = self._ntp_for_checks()
        if self.checked_ntp is not None:
            for server in self.checked_ntp["servers"]:
                args += ["--ntp-server", server]
            args += ["--max-skew-seconds", f"{self.checked_ntp['maxSkewSeconds']:g}"]
        report: Document = json.loads(await checked_output(self.host, *args))
        failures = [f"{c['name']}: {c['message']}" for c in report["checks"]
                    if c["status"] == "fail"]
        if failures:
            log.warning("hard prechecks failed: %s", "; ".join(failures))
        sdnotify.status("prechecks " + ("passed" if report["ok"] else "FAILED"))
        return report

    def registered(self, identity: Identity, report: Document) -> None:
        """The machine just registered with report: check again after a while."""
        self._start(identity, wait_first=True, sent_ok=report["ok"])

    def prepared(self, identity: Identity) -> None:
        """The machine's prepare items are all applied: check the prerequisites again, and
        keep doing so with backoff (assigned() stops it once the machine left Prepare). Already
        doing so, it goes on: the same phase applied again (each report sent makes a new
        assignment) must not restart the checks without their backoff."""
        if self._after_prepare and self._rechecking is not None and not self._rechecking.done():
            return
        self._start(identity, wait_first=False, sent_ok=None, prepared=True)

    def assigned(self, identity: Identity, assignment: Document) -> None:
        """Each new assignment: while the machine is Pending, keep checking (at once on this
        agent's first assignment, and when the cluster's NTP settings change what the clock
        check uses); in Prepare, go on with the checks after it (prepared()); in any other
        state, stop."""
        self.cluster_ntp = assignment.get("ntp")
        if assignment["state"] == "Prepare" and self._after_prepare:
            return
        if assignment["state"] != "Pending":
            self.stop()
        elif self._rechecking is None or self._rechecking.done() \
                or self._ntp_for_checks() != self.checked_ntp:
            self._start(identity, wait_first=False, sent_ok=None)

    def stop(self) -> None:
        self._after_prepare = False
        if self._rechecking is not None:
            self._rechecking.cancel()

    def _ntp_for_checks(self) -> Document | None:
        """The cluster's NTP settings when the clock check should use them (this node's
        config names no servers); None: the config's own."""
        if self.settings.own_ntp_servers or not self.cluster_ntp \
                or not self.cluster_ntp.get("servers"):
            return None
        return self.cluster_ntp

    def _start(self, identity: Identity, wait_first: bool, sent_ok: bool | None,
               prepared: bool = False) -> None:
        self.stop()
        self._after_prepare = prepared
        self._rechecking = asyncio.create_task(
            self._recheck(identity, wait_first, sent_ok, prepared))

    async def _recheck(self, identity: Identity, wait_first: bool, sent_ok: bool | None,
                       prepared: bool = False) -> None:
        """Run the prechecks with backoff and send each report, but a passing one after a
        passing one (sent_ok: whether the coordinator's last one passed; None: unknown). Ends
        when the coordinator refuses a report (the machine was approved, or, after Prepare,
        admitted into Deploy; or deleted)."""
        longest = self.settings.precheck_recheck_seconds
        first = min(RECHECK_FIRST_SECONDS, longest)
        attempt = 0
        while True:
            if wait_first:
                attempt += 1
                await asyncio.sleep(delay(attempt, longest if sent_ok else first, longest,
                                          self.rand))
            wait_first = True
            report = await self.run(prepared)
            if report["ok"] and sent_ok:
                continue  # nothing new to say
            try:
                await self.client.precheck(identity.machine_id, identity.credential, report)
            except Rejected:
                return
            except Unreachable:
                continue
            sent_ok = report["ok"]
