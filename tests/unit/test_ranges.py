"""What a resumed download reads of an answer's headers: where a 206's bytes start, and
which validator If-Range may name."""

from __future__ import annotations

import pytest

from nodeagent.http_client import range_start, validator_of


@pytest.mark.parametrize(("header", "start"), [
    ("bytes 1048576-2097151/2097152", 1048576),
    ("bytes 0-9/10", 0),
    ("bytes */10", -1),  # a 416's: no bytes
    ("items 5-9/10", -1),
    ("", -1),
])
def test_where_a_part_starts(header: str, start: int) -> None:
    assert range_start(header) == start


def test_if_range_names_a_strong_etag_else_the_date() -> None:
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    assert validator_of({"ETag": '"abc"', "Last-Modified": date}) == '"abc"'
    assert validator_of({"ETag": 'W/"abc"', "Last-Modified": date}) == date  # weak: never
    assert validator_of({}) is None
