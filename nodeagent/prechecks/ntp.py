"""Time: every configured NTP server must answer, and the clock must agree with them.

Kubernetes certificates and etcd leases break on skewed clocks. Both checks share one
query per server, all servers queried concurrently, each bounded by ntp.timeout.

Queries run on the event loop (no thread per server): a thread pool would queue the
servers beyond its size behind the others' timeouts, and a blocking name lookup would
outlive the check. Names resolve as the coordinator's do, through the root's files.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import dns.exception
import ntplib

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, skipped, warned
from nodeagent.prechecks.coordinator import resolve
from nodeagent.wire.protocol import split_host_port

NO_SERVERS = "no NTP servers configured (ntp.servers in the config file)"
NTP_VERSION = 4
MODE_CLIENT, MODE_SERVER = 3, 4
LEAP_UNSYNCHRONISED = 3
MAX_STRATUM = 15


@dataclass(frozen=True)
class Sample:
    server: str
    offset: float | None  # seconds the server is ahead of us; None when it did not answer
    error: str = ""
    # Why the server's own time is not to be trusted, when it says it is not synchronised.
    unsynchronised: str = ""


class _Reply(asyncio.DatagramProtocol):
    """The first server-mode datagram that answers our query, with the time it arrived."""

    def __init__(self, origin: bytes) -> None:
        self.origin = origin  # our transmit timestamp, which the answer must echo
        self.answer: asyncio.Future[tuple[bytes, float]] = (
            asyncio.get_running_loop().create_future()
        )

    def datagram_received(self, data: bytes, addr: object) -> None:
        arrived = time.time()
        if self.answer.done() or len(data) < 48 or data[0] & 0x7 != MODE_SERVER:
            return
        if data[24:32] == self.origin:  # not a stale or forged answer to another query
            self.answer.set_result((data, arrived))

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable
        if not self.answer.done():
            self.answer.set_exception(exc)


async def _ask(address: str, port: int) -> ntplib.NTPStats:
    query = ntplib.NTPPacket(
        version=NTP_VERSION, mode=MODE_CLIENT, tx_timestamp=ntplib.system_to_ntp_time(time.time())
    ).to_data()
    transport, reply = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: _Reply(query[40:48]), remote_addr=(address, port)
    )
    try:
        transport.sendto(query)
        data, arrived = await reply.answer
    finally:
        transport.close()
    stats = ntplib.NTPStats()
    stats.from_data(data)
    stats.dest_timestamp = ntplib.system_to_ntp_time(arrived)
    return stats


async def _query(host: Host, server: str, timeout: float) -> Sample:
    name, port = split_host_port(server, 123)
    resolving = True
    try:
        async with asyncio.timeout(timeout):
            addresses = await resolve(host, name, timeout)
            resolving = False
            stats = await _ask(addresses[0], port)
    except TimeoutError:
        waited_for = f"{name} did not resolve" if resolving else "no answer"
        return Sample(server, None, f"{waited_for} within {timeout:g}s")
    except (dns.exception.DNSException, OSError, ntplib.NTPException) as exc:
        return Sample(server, None, str(exc) or type(exc).__name__)
    unsynchronised = ""
    if stats.leap == LEAP_UNSYNCHRONISED or not 0 < stats.stratum <= MAX_STRATUM:
        unsynchronised = (
            f"not synchronised itself (leap indicator {stats.leap}, stratum {stats.stratum})"
        )
    return Sample(server, stats.offset, unsynchronised=unsynchronised)


async def samples(ctx: CheckContext) -> list[Sample]:
    cfg = ctx.config.ntp

    async def probe() -> list[Sample]:
        return list(await asyncio.gather(*(_query(ctx.host, s, cfg.timeout) for s in cfg.servers)))

    return await ctx.shared("ntp", probe)


def evaluate_reachable(found: list[Sample]) -> Outcome:
    if not found:
        return skipped(NO_SERVERS)
    silent = [s for s in found if s.offset is None]
    data = {"servers": {s.server: s.error or "ok" for s in found}}
    if len(silent) == len(found):
        return failed(
            f"no NTP server answered: {'; '.join(f'{s.server}: {s.error}' for s in silent)}",
            "allow UDP port 123 to the NTP servers, or configure reachable ones in ntp.servers",
            **data,
        )
    if silent:
        return warned(
            f"{len(silent)} of {len(found)} NTP servers did not answer: "
            + "; ".join(f"{s.server}: {s.error}" for s in silent),
            "fix or remove the silent servers in ntp.servers",
            **data,
        )
    return passed(f"all {len(found)} NTP servers answered", **data)


def evaluate_skew(found: list[Sample], max_skew: float) -> Outcome:
    if not found:
        return skipped(NO_SERVERS)
    answered = [s for s in found if s.offset is not None]
    if not answered:
        return skipped("no NTP server answered; see the NTP reachability check")
    # A server that says it is not synchronised serves a clock nobody vouches for.
    unsynchronised = {s.server: s.unsynchronised for s in answered if s.unsynchronised}
    listed = "; ".join(f"{server}: {why}" for server, why in unsynchronised.items())
    fix_servers = "fix these servers' own time sources, or configure synchronised ones in ntp.servers"
    trusted = {s.server: s.offset for s in answered if s.offset is not None and not s.unsynchronised}
    if not trusted:
        return failed(
            f"no synchronised NTP server to compare the clock with: {listed}",
            fix_servers,
            unsynchronised=unsynchronised,
        )
    offset = statistics.median(trusted.values())
    data: dict[str, object] = {
        "offset_seconds": round(offset, 6),
        "max_skew_seconds": max_skew,
        "offsets": {server: round(value, 6) for server, value in trusted.items()},
    }
    if unsynchronised:
        data["unsynchronised"] = unsynchronised
    skew = abs(offset)
    remedy = "synchronise the clock (enable chronyd or systemd-timesyncd against ntp.servers)"
    if skew > max_skew:
        return failed(
            f"clock is off by {offset:+.3f}s from the NTP servers (limit {max_skew:g}s)",
            remedy,
            **data,
        )
    if skew > max_skew / 2:
        return warned(
            f"clock is off by {offset:+.3f}s, over half the {max_skew:g}s limit", remedy, **data
        )
    if unsynchronised:
        return warned(
            f"clock is within {skew:.3f}s of the synchronised NTP servers; ignored {listed}",
            fix_servers,
            **data,
        )
    return passed(f"clock is within {skew:.3f}s of the NTP servers", **data)


async def run_reachable(ctx: CheckContext) -> Outcome:
    return evaluate_reachable(await samples(ctx))


async def run_skew(ctx: CheckContext) -> Outcome:
    return evaluate_skew(await samples(ctx), ctx.config.ntp.max_skew_seconds)
