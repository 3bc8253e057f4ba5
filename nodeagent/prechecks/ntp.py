"""Time: every configured NTP server must answer, and the clock must agree with them.

Kubernetes certificates and etcd leases break on skewed clocks. Both checks share one
query per server, all servers queried concurrently, each bounded by ntp.timeout.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass

import ntplib

from nodeagent.config import split_host_port
from nodeagent.prechecks.base import CheckContext, Outcome, failed, passed, skipped, warned

NO_SERVERS = "no NTP servers configured (ntp.servers in the config file)"


@dataclass(frozen=True)
class Sample:
    server: str
    offset: float | None  # seconds the server is ahead of us; None when it did not answer
    error: str = ""


def _query(server: str, timeout: float) -> Sample:
    host, port = split_host_port(server, 123)
    try:
        response = ntplib.NTPClient().request(host, version=4, port=port, timeout=timeout)
    except (ntplib.NTPException, OSError) as exc:
        return Sample(server, None, str(exc) or type(exc).__name__)
    return Sample(server, response.offset)


async def samples(ctx: CheckContext) -> list[Sample]:
    cfg = ctx.config.ntp

    async def probe() -> list[Sample]:
        return list(
            await asyncio.gather(*(asyncio.to_thread(_query, s, cfg.timeout) for s in cfg.servers))
        )

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
    offset = statistics.median(s.offset for s in answered if s.offset is not None)
    data = {
        "offset_seconds": round(offset, 6),
        "max_skew_seconds": max_skew,
        "offsets": {s.server: round(s.offset, 6) for s in answered if s.offset is not None},
    }
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
    return passed(f"clock is within {skew:.3f}s of the NTP servers", **data)


async def run_reachable(ctx: CheckContext) -> Outcome:
    return evaluate_reachable(await samples(ctx))


async def run_skew(ctx: CheckContext) -> Outcome:
    return evaluate_skew(await samples(ctx), ctx.config.ntp.max_skew_seconds)
