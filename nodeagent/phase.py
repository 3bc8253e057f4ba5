"""`nodeagent apply`: one phase of an assignment, applied in a process of its own.

`nodeagent run` (nodeagent/daemon.py) starts it for every phase it is assigned and writes the
Assignment, as the coordinator sent it, as one JSON line on its stdin. This process validates
it with the wire types (nodeagent/wire/protocol.py), applies the items in order with the journal
(items/runner.py) and prints each ItemReport as one JSON line on stdout, which the daemon
delivers in order. So the daemon never loads pydantic or the item code, and what a phase
needed goes back to the node when the phase ends.

The daemon closes stdin to stop the phase (a new assignment replaced it); stdin closes too
when the daemon dies. Either way, as on SIGTERM, the running item is stopped (a command's
whole process group is killed) and the process exits; the journal makes that safe at any
point, as it does a kill -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from nodeagent import trust
from nodeagent.children import EXIT_APPLIED, EXIT_GAVE_UP, EXIT_STOPPED
from nodeagent.client import CoordinatorClient, Rejected, Unreachable
from nodeagent.home import load_home
from nodeagent.http_client import Body
from nodeagent.identity import IDENTITY_FILE, load_identity
from nodeagent.items.cache import NodeCache
from nodeagent.items.outcome import ItemFailed
from nodeagent.items.runner import run_phase
from nodeagent.journal import Journal, JournalError
from nodeagent.proxy import coordinator_endpoints
from nodeagent.removal import JOURNAL_FILE
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.protocol import Assignment, ItemReport
from nodeagent.wire.validation import problems_from

EXIT_CANNOT_APPLY = 2  # a bad assignment or an unreadable journal: the daemon tries again


async def run_items(config: AgentConfig, root: Path, assignment: Assignment,
                journal: Journal) -> bool:
    """Run the assignment's phase; True when every item is applied."""
    state_dir = Path(config.state_dir)
    endpoints = coordinator_endpoints(config.coordinator.all_urls, config.proxy, os.environ)
    client = CoordinatorClient(endpoints, timeout=config.coordinator.timeout * 5)
    home = load_home(state_dir)  # the coordinator moved (home.py): its place comes first
    if home is not None:
        client.move_to(home.current.endpoints(endpoints[0].proxy), home.current.context())
    elif client.url.startswith("https://"):
        client.context = trust.context_for(trust.trusted_ca(config.coordinator.ca_file,
                                                            state_dir))

    async def artifacts(name: str, headers: Mapping[str, str]) -> Body:
        # Read at each download: the daemon may have rotated the credential meanwhile.
        identity = load_identity(state_dir / IDENTITY_FILE)
        return await client.artifact(identity.credential if identity else "", name, headers)

    async def upload(item: str, snapshot: BinaryIO) -> None:
        identity = load_identity(state_dir / IDENTITY_FILE)
        if identity is None:
            raise ItemFailed("cannot upload the etcd snapshot: this agent has no identity")
        try:
            await client.upload_etcd_snapshot(identity.machine_id, identity.credential, item,
                                              snapshot)
        except (Rejected, Unreachable) as exc:
            raise ItemFailed(f"the coordinator did not keep the etcd snapshot: {exc}") from None

    async def report(item_report: ItemReport) -> None:
        sys.stdout.write(item_report.model_dump_json() + "\n")
        sys.stdout.flush()

    return await run_phase(assignment.items, assignment.values, journal, report,
                           assignment.retry, root, artifacts, config.proxy.over(assignment.proxy),
                           NodeCache(state_dir / "cache", int(config.cache_max_gib * 2**30)),
                           secrets=assignment.secrets, upload=upload)


async def apply_from_stdin(config: AgentConfig, root: Path) -> int:
    """The assignment from stdin, applied until done or until stdin closes; the exit code."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    try:
        assignment = Assignment.model_validate_json(await stdin.readline())
        journal = Journal(Path(config.state_dir) / JOURNAL_FILE, assignment.journal_owner)
    except ValidationError as exc:  # each problem's place and kind, never its value: a secret
        problems = "; ".join(problem.text() for problem in problems_from(exc))
        print(f"error: bad assignment on stdin: {problems}", file=sys.stderr)
        return EXIT_CANNOT_APPLY
    except JournalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_APPLY
    work = asyncio.create_task(run_items(config, root, assignment, journal))
    loop.add_signal_handler(signal.SIGTERM, work.cancel)
    closed = asyncio.create_task(stdin.read())
    await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
    closed.cancel()
    if not work.done():
        work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return EXIT_APPLIED if await work else EXIT_GAVE_UP
    return EXIT_STOPPED
