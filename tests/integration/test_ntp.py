"""ntp-reachable and time-skew against real NTP servers on 127.0.0.1: a chronyd, a responder
whose clock is shifted by a chosen number of seconds, and a socket that never answers.

The checks run through the real runner, with the whole suite, as `nodeagent precheck` runs
them: the NTP results must be right and must not hold up, or be held up by, the others.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.host import Host
from nodeagent.prechecks import CHECKS, NAMES
from nodeagent.prechecks.base import Check, CheckContext
from nodeagent.prechecks.runner import run_checks
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.protocol import CheckResult, PrecheckReport, Status
from tests.support.agent import checks_by_name, precheck_argv
from tests.support.chrony import chronyd
from tests.support.ntp_responder import silent_udp_server, skewed_ntp_server
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

REMEDY_SYNC = "synchronise the clock (enable chronyd or systemd-timesyncd against ntp.servers)"


@pytest.fixture(scope="module")
def chrony(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real chronyd serving NTP; yields its address as ntp.servers takes it."""
    with chronyd(tmp_path_factory.mktemp("chronyd")) as port:
        yield f"127.0.0.1:{port}"


@pytest.fixture
def silent() -> Iterator[str]:
    """An NTP address that takes queries and never answers."""
    with silent_udp_server() as port:
        yield f"127.0.0.1:{port}"


NTP_CHECKS = tuple(c for c in CHECKS if c.name in ("ntp-reachable", "time-skew"))


async def precheck(tmp_path: Path, checks: tuple[Check, ...] = CHECKS, **ntp: Any) -> PrecheckReport:
    """The checks (the whole suite by default) on an empty machine root, with this ntp
    config section."""
    config = AgentConfig.model_validate({"ntp": ntp})
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return await run_checks(checks, CheckContext(Host(root), config, "worker"))


def results(report: PrecheckReport) -> dict[str, CheckResult]:
    found = {c.name: c for c in report.checks}
    if len(found) > len(NTP_CHECKS):
        assert list(found) == list(NAMES), "every check reports, in suite order"
    return found


# -- a real chronyd -----------------------------------------------------------------------

async def test_chronyd_answers_and_the_clock_agrees(tmp_path: Path, chrony: str) -> None:
    checks = results(await precheck(tmp_path, servers=[chrony]))

    reachable = checks["ntp-reachable"]
    assert reachable.status is Status.PASS, reachable
    assert reachable.message == "all 1 NTP servers answered"
    assert reachable.data == {"servers": {chrony: "ok"}}

    skew = checks["time-skew"]
    assert skew.status is Status.PASS, skew
    # chronyd serves this machine's own clock: the offset is the query's jitter.
    assert abs(skew.data["offset_seconds"]) < 0.05, skew.data
    assert skew.data["max_skew_seconds"] == 2.0
    assert list(skew.data["offsets"]) == [chrony]
    assert re.fullmatch(r"clock is within 0\.0\d\ds of the NTP servers", skew.message)


# -- a server whose clock is off ------------------------------------------------------------

@pytest.mark.parametrize("shift", [30.0, -30.0])
async def test_skew_over_the_limit_fails_naming_offset_and_limit(
    tmp_path: Path, shift: float
) -> None:
    with skewed_ntp_server(shift) as server:
        report = await precheck(tmp_path, servers=[server.address])
    checks = results(report)
    assert server.queries == 1, "both NTP checks share one query per server"
    assert checks["ntp-reachable"].status is Status.PASS

    skew = checks["time-skew"]
    assert skew.status is Status.FAIL, skew
    assert skew.data["offset_seconds"] == pytest.approx(shift, abs=0.05)
    match = re.fullmatch(
        r"clock is off by ([+-]\d+\.\d{3})s from the NTP servers \(limit 2s\)", skew.message
    )
    assert match, skew.message
    assert float(match[1]) == pytest.approx(shift, abs=0.05)
    assert skew.remedy == REMEDY_SYNC
    assert not report.ok


async def test_skew_over_half_the_limit_warns(tmp_path: Path) -> None:
    with skewed_ntp_server(1.5) as server:
        skew = results(await precheck(tmp_path, servers=[server.address]))["time-skew"]
    assert skew.status is Status.WARN, skew
    assert re.fullmatch(r"clock is off by \+1\.(49\d|50\d)s, over half the 2s limit",
                        skew.message), skew.message
    assert skew.remedy == REMEDY_SYNC


@pytest.mark.parametrize(
    ("shift", "max_skew", "expected"),
    [
        (30.0, 100, Status.PASS),  # a generous limit accepts what the default fails
        (30.0, 45, Status.WARN),  # over half of it
        (1.5, 1, Status.FAIL),  # a strict limit fails what the default only warns about
        (0.4, 1, Status.PASS),
    ],
)
async def test_configured_max_skew_decides(
    tmp_path: Path, shift: float, max_skew: float, expected: Status
) -> None:
    with skewed_ntp_server(shift) as server:
        skew = results(
            await precheck(tmp_path, servers=[server.address], maxSkewSeconds=max_skew)
        )["time-skew"]
    assert skew.status is expected, skew
    assert skew.data["max_skew_seconds"] == max_skew
    if expected is not Status.PASS:
        assert f"{max_skew:g}s" in skew.message


async def test_skew_is_the_median_so_one_falseticker_is_outvoted(
    tmp_path: Path, chrony: str
) -> None:
    with skewed_ntp_server(0.0) as good, skewed_ntp_server(30.0) as bad:
        servers = [chrony, good.address, bad.address]
        skew = results(await precheck(tmp_path, servers=servers))["time-skew"]
    assert skew.status is Status.PASS, skew
    assert skew.data["offsets"][bad.address] == pytest.approx(30.0, abs=0.05)
    assert abs(skew.data["offset_seconds"]) < 0.05


# -- servers that never answer ----------------------------------------------------------------

async def test_silent_server_fails_within_its_timeout_and_holds_nothing_up(
    tmp_path: Path, silent: str
) -> None:
    timeout = 1.0
    report = await precheck(tmp_path, servers=[silent], timeout=timeout)
    checks = results(report)

    reachable = checks["ntp-reachable"]
    assert reachable.status is Status.FAIL, reachable
    assert reachable.message == f"no NTP server answered: {silent}: no answer within 1s"
    assert reachable.remedy.startswith("allow UDP port 123 to the NTP servers")
    assert timeout <= reachable.duration < timeout + 0.5
    assert report.duration < timeout + 0.5, [(c.name, c.duration) for c in report.checks]

    skew = checks["time-skew"]
    assert skew.status is Status.SKIP
    assert skew.message == "no NTP server answered; see the NTP reachability check"
    # The other checks all came back with verdicts of their own, none cut short by the runner.
    for check in report.checks:
        assert "did not finish within" not in check.message, check
    assert checks["coordinator"].status is Status.SKIP
    assert checks["os"].status is Status.FAIL  # the empty root has no /etc/os-release


async def test_one_silent_server_of_two_warns_naming_it(
    tmp_path: Path, chrony: str, silent: str
) -> None:
    timeout = 1.0
    report = await precheck(tmp_path, servers=[silent, chrony], timeout=timeout)
    checks = results(report)

    reachable = checks["ntp-reachable"]
    assert reachable.status is Status.WARN, reachable
    assert reachable.message == (
        f"1 of 2 NTP servers did not answer: {silent}: no answer within 1s"
    )
    assert reachable.remedy == "fix or remove the silent servers in ntp.servers"
    assert reachable.data == {"servers": {silent: "no answer within 1s", chrony: "ok"}}
    assert reachable.duration < timeout + 0.5

    skew = checks["time-skew"]
    assert skew.status is Status.PASS, skew
    assert list(skew.data["offsets"]) == [chrony], "only the answering server counts"
    assert report.duration < timeout + 0.5


async def test_more_silent_servers_than_worker_threads_still_fail_within_the_timeout(
    tmp_path: Path,
) -> None:
    # asyncio's default thread pool has min(32, CPUs + 4) workers; queries run on threads
    # would queue the servers beyond that behind the others' timeouts. Only the NTP checks
    # run: the bound under test is theirs.
    count = min(32, (os.cpu_count() or 1) + 4) + 2
    timeout = 1.0
    with contextlib.ExitStack() as stack:
        servers = [f"127.0.0.1:{stack.enter_context(silent_udp_server())}" for _ in range(count)]
        report = await precheck(tmp_path, NTP_CHECKS, servers=servers, timeout=timeout)
    reachable = results(report)["ntp-reachable"]
    assert reachable.status is Status.FAIL, reachable
    assert reachable.data == {"servers": dict.fromkeys(servers, "no answer within 1s")}
    assert reachable.duration < timeout + 0.5
    assert report.duration < timeout + 0.5


async def test_closed_port_fails_at_once_as_refused(tmp_path: Path) -> None:
    # Nothing bound: the kernel answers with ICMP port unreachable, no need to wait it out.
    closed = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
    report = await precheck(tmp_path, servers=[closed], timeout=5)
    reachable = results(report)["ntp-reachable"]
    assert reachable.status is Status.FAIL, reachable
    assert reachable.message == f"no NTP server answered: {closed}: [Errno 111] Connection refused"
    assert reachable.duration < 1


# -- servers that answer but are not synchronised themselves ----------------------------------

async def test_unsynchronised_chronyd_is_reachable_but_not_trusted(tmp_path: Path) -> None:
    # A chronyd without any time source (as one that lost its upstream) still answers.
    with chronyd(tmp_path / "chronyd", local_stratum=None) as port:
        checks = results(await precheck(tmp_path, servers=[f"127.0.0.1:{port}"]))
    server = f"127.0.0.1:{port}"
    assert checks["ntp-reachable"].status is Status.PASS

    skew = checks["time-skew"]
    assert skew.status is Status.FAIL, skew
    assert skew.message == (
        f"no synchronised NTP server to compare the clock with: {server}: "
        "not synchronised itself (leap indicator 3, stratum 0)"
    )
    assert skew.remedy.startswith("fix these servers' own time sources")
    assert skew.data == {
        "unsynchronised": {server: "not synchronised itself (leap indicator 3, stratum 0)"}
    }


async def test_unsynchronised_server_is_left_out_of_the_median_and_warned_about(
    tmp_path: Path, chrony: str
) -> None:
    # Its clock is 30 s off, but it says it is not synchronised: it must not fail the node.
    with skewed_ntp_server(30.0, leap=3, stratum=0) as lost:
        skew = results(await precheck(tmp_path, servers=[chrony, lost.address]))["time-skew"]
    assert skew.status is Status.WARN, skew
    assert list(skew.data["offsets"]) == [chrony]
    assert abs(skew.data["offset_seconds"]) < 0.05
    assert re.fullmatch(
        r"clock is within 0\.0\d\ds of the synchronised NTP servers; ignored "
        + re.escape(f"{lost.address}: not synchronised itself (leap indicator 3, stratum 0)"),
        skew.message,
    ), skew.message


# -- servers by name --------------------------------------------------------------------------

async def test_server_names_resolve_through_the_roots_hosts_file(
    tmp_path: Path, chrony: str
) -> None:
    port = chrony.rsplit(":", 1)[1]
    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/etc/hosts").write_text("127.0.0.1 localhost\n127.0.0.1 time.test\n")
    # No resolv.conf in the root: a name not in its hosts file fails before any query is sent.
    servers = [f"time.test:{port}", f"nosuch.test:{port}"]
    checks = results(await precheck(tmp_path, NTP_CHECKS, servers=servers))

    reachable = checks["ntp-reachable"]
    assert reachable.status is Status.WARN, reachable
    assert reachable.data["servers"][f"time.test:{port}"] == "ok"
    assert reachable.message.startswith(f"1 of 2 NTP servers did not answer: nosuch.test:{port}: ")
    assert "resolv.conf" in reachable.message
    assert checks["time-skew"].status is Status.PASS


# -- the command line's overrides (what the agent passes for its cluster's settings) ---------

def test_command_line_ntp_servers_and_limit_override_the_config(
    tmp_path: Path, silent: str
) -> None:
    """The config names a silent server; --ntp-server and --max-skew-seconds replace it with
    the cluster's, as the agent does when it rechecks a registered machine."""
    config = tmp_path / "config.yaml"
    config.write_text(f"ntp:\n  servers: ['{silent}']\n  timeout: 0.3\n")
    root = tmp_path / "root"
    root.mkdir()
    with skewed_ntp_server(30.0) as server:
        runs = {limit: subprocess.run(
            precheck_argv(root, "--config", str(config), "--output", "json", "--ntp-server",
                          server.address, "--max-skew-seconds", limit),
            capture_output=True, text=True) for limit in ("5", "100")}
    strict, lenient = (checks_by_name(runs[limit]) for limit in ("5", "100"))
    assert strict["ntp-reachable"]["status"] == lenient["ntp-reachable"]["status"] == "pass"
    assert strict["time-skew"]["status"] == "fail"
    assert "(limit 5s)" in strict["time-skew"]["message"]
    assert lenient["time-skew"]["status"] == "pass"


def test_a_bad_command_line_ntp_server_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(precheck_argv(tmp_path, "--ntp-server", "ntp.example:0"),
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "--ntp-server" in result.stderr and "port must be a number" in result.stderr
    assert "Traceback" not in result.stderr
