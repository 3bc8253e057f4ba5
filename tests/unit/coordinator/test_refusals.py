"""The tally of refused admin attempts: however many requests and addresses, a window writes
a bounded number of events, and together they count every refusal."""

from __future__ import annotations

from coordinator.domain.machines.refusals import (
    ADMIN_REQUEST,
    MAX_PATH,
    MAX_SOURCES,
    OTHERS,
    REGISTRATION,
    RefusalTally,
)


def test_a_flood_from_many_addresses_writes_a_bounded_number_of_events_counting_all() -> None:
    tally = RefusalTally()
    for number in range(20_000):
        tally.note(f"10.0.{number // 250}.{number % 250}", 401, "unknown token", "GET",
                   "/v1/" + "x" * 10_000, now=100.0 + number / 1000)
    written = tally.drain(now=130.0)
    assert len(written) == MAX_SOURCES + 1
    assert sum(e.data["refused"] for e in written) == 20_000
    others = next(e for e in written if e.data["source"] == OTHERS)
    assert others.data["refused"] == 20_000 - MAX_SOURCES
    assert all(e.kind == "audit" and len(e.data["path"]) == MAX_PATH for e in written)
    assert tally.drain(now=190.0) == []


def test_one_source_refused_again_and_again_is_one_event_saying_how_often() -> None:
    tally = RefusalTally()
    for _ in range(3):
        tally.note("192.0.2.7", 403, "admin token 'ci' is read-only: it may only read", "POST",
                   "/v1/clusters/lab/upgrade/pause", now=10.0)
    tally.note("192.0.2.7", 401, "missing bearer token", "GET", "/v1/machines", now=11.0)
    forbidden, unauthorized = tally.drain(now=60.0)
    assert forbidden.message == ("192.0.2.7: admin request refused 3 times (403: admin token "
                                 "'ci' is read-only: it may only read), last POST "
                                 "/v1/clusters/lab/upgrade/pause")
    assert unauthorized.message.startswith("192.0.2.7: admin request refused once (401: ")


def test_registrations_are_counted_apart_and_only_a_windows_first_refusal_is_news() -> None:
    tally = RefusalTally()
    news = [tally.note("192.0.2.7", 401, "unknown join token", "POST", "/v1/agent/register",
                       now=10.0, what=REGISTRATION) for _ in range(3)]
    news.append(tally.note("192.0.2.7", 401, "missing bearer token", "GET", "/v1/machines",
                           now=11.0))
    assert news == [True, False, False, True]
    registrations, admin = tally.drain(now=60.0)
    assert registrations.message.startswith("192.0.2.7: registration refused 3 times (401: ")
    assert (registrations.data["what"], admin.data["what"]) == (REGISTRATION, ADMIN_REQUEST)
    assert tally.note("192.0.2.7", 401, "unknown join token", "POST", "/v1/agent/register",
                      now=70.0, what=REGISTRATION)  # a new window: news again
