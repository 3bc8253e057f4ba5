from __future__ import annotations

from nodeagent.prechecks import ntp
from nodeagent.prechecks.ntp import NO_SERVERS, Sample, evaluate_reachable, evaluate_skew
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext

A, B, C = "ntp-a.example", "ntp-b.example", "10.0.0.1:1123"


def test_reachable_with_no_servers_skips() -> None:
    outcome = evaluate_reachable([])
    assert outcome.status is Status.SKIP
    assert outcome.message == "no NTP servers configured (ntp.servers in the config file)"


def test_all_servers_answering_passes() -> None:
    outcome = evaluate_reachable([Sample(A, 0.01), Sample(B, -0.02)])
    assert outcome.status is Status.PASS
    assert outcome.message == "all 2 NTP servers answered"
    assert outcome.data == {"servers": {A: "ok", B: "ok"}}


def test_some_silent_servers_warn_naming_them() -> None:
    outcome = evaluate_reachable([Sample(A, 0.01), Sample(B, None, "timed out"), Sample(C, 0.0)])
    assert outcome.status is Status.WARN
    assert outcome.message == "1 of 3 NTP servers did not answer: ntp-b.example: timed out"
    assert outcome.remedy == "fix or remove the silent servers in ntp.servers"
    assert outcome.data == {"servers": {A: "ok", B: "timed out", C: "ok"}}


def test_no_server_answering_fails() -> None:
    outcome = evaluate_reachable([Sample(A, None, "timed out"), Sample(B, None, "refused")])
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "no NTP server answered: ntp-a.example: timed out; ntp-b.example: refused"
    )
    assert outcome.remedy.startswith("allow UDP port 123 to the NTP servers")


def test_skew_with_no_servers_skips() -> None:
    assert evaluate_skew([], 2.0).message == NO_SERVERS


def test_skew_with_no_answers_points_at_the_reachability_check() -> None:
    outcome = evaluate_skew([Sample(A, None, "timed out")], 2.0)
    assert outcome.status is Status.SKIP
    assert outcome.message == "no NTP server answered; see the NTP reachability check"


def test_small_skew_passes() -> None:
    outcome = evaluate_skew([Sample(A, -0.25)], 2.0)
    assert outcome.status is Status.PASS
    assert outcome.message == "clock is within 0.250s of the NTP servers"
    assert outcome.data == {"offset_seconds": -0.25, "max_skew_seconds": 2.0,
                            "offsets": {A: -0.25}}


def test_skew_exactly_at_half_the_limit_passes_and_above_warns() -> None:
    assert evaluate_skew([Sample(A, 1.0)], 2.0).status is Status.PASS
    outcome = evaluate_skew([Sample(A, -1.5)], 2.0)
    assert outcome.status is Status.WARN
    assert outcome.message == "clock is off by -1.500s, over half the 2s limit"
    assert outcome.remedy.startswith("synchronise the clock")


def test_skew_exactly_at_the_limit_warns_and_above_fails() -> None:
    assert evaluate_skew([Sample(A, 2.0)], 2.0).status is Status.WARN
    outcome = evaluate_skew([Sample(A, 2.5)], 2.0)
    assert outcome.status is Status.FAIL
    assert outcome.message == "clock is off by +2.500s from the NTP servers (limit 2s)"
    assert outcome.remedy == (
        "synchronise the clock (enable chronyd or systemd-timesyncd against ntp.servers)"
    )


def test_skew_uses_the_median_of_the_answering_servers() -> None:
    # One server far off does not fail the node when the others agree with its clock.
    found = [Sample(A, 0.1), Sample(B, 0.2), Sample(C, 3600.0), Sample("silent", None, "x")]
    outcome = evaluate_skew(found, 2.0)
    assert outcome.status is Status.PASS
    assert outcome.data["offset_seconds"] == 0.2
    assert set(outcome.data["offsets"]) == {A, B, C}

    even = evaluate_skew([Sample(A, 1.0), Sample(B, 5.0)], 2.0)
    assert even.status is Status.FAIL
    assert even.data["offset_seconds"] == 3.0


def test_configured_limit_is_used() -> None:
    assert evaluate_skew([Sample(A, 0.3)], 0.5).status is Status.WARN
    assert evaluate_skew([Sample(A, 0.3)], 0.5).message.endswith("over half the 0.5s limit")


async def test_runs_skip_without_querying_when_no_servers_are_configured(
    make_ctx: MakeContext,
) -> None:
    ctx = make_ctx()
    assert (await ntp.run_reachable(ctx)).message == NO_SERVERS
    assert (await ntp.run_skew(ctx)).message == NO_SERVERS
