"""The artifact port's choice of bytes: what aiohttp's FileResponse answers on the API port
(a resumed download gets the same bytes from either), and an If-Range naming another
version gets the file whole."""

from __future__ import annotations

import pytest

from coordinator.edge.byteranges import Selection, etag_of, select

SIZE = 1000
ETAG = etag_of(1_700_000_000_123_456_789, SIZE)
DATE = "Wed, 25 Nov 2026 10:00:00 GMT"


@pytest.mark.parametrize(("asked", "chosen"), [
    (None, Selection(200, 0, SIZE)),
    ("bytes=100-", Selection(206, 100, SIZE)),
    ("bytes=0-99", Selection(206, 0, 100)),
    ("bytes=990-5000", Selection(206, 990, SIZE)),  # an end past the file's: to its end
    ("bytes=-10", Selection(206, SIZE - 10, SIZE)),
    ("bytes=-5000", Selection(206, 0, SIZE)),
    ("BYTES=999-", Selection(206, 999, SIZE)),
    (f"bytes={SIZE}-", Selection(416, 0, 0)),
    ("bytes=5-4", Selection(416, 0, 0)),
    ("bytes=-", Selection(416, 0, 0)),
    ("bytes=0-1,5-6", Selection(416, 0, 0)),  # several ranges: not served
    ("items=0-1", Selection(416, 0, 0)),
])
def test_a_range_selects_its_bytes_as_the_api_port_does(asked: str | None,
                                                       chosen: Selection) -> None:
    assert select(SIZE, asked, None, ETAG, DATE) == chosen


@pytest.mark.parametrize("validator", [ETAG, DATE])
def test_if_range_naming_this_version_keeps_the_range(validator: str) -> None:
    assert select(SIZE, "bytes=100-", validator, ETAG, DATE) == Selection(206, 100, SIZE)


@pytest.mark.parametrize("validator", [etag_of(1, SIZE), f"W/{ETAG}",
                                       "Tue, 24 Nov 2026 10:00:00 GMT"])
def test_if_range_naming_another_version_gets_the_whole_file(validator: str) -> None:
    assert select(SIZE, "bytes=100-", validator, ETAG, DATE) == Selection(200, 0, SIZE)


def test_the_etag_is_aiohttps() -> None:
    """Quoted hex of the modification time (ns) and size: a download begun on the API port
    resumes on the artifact port with the same If-Range."""
    assert etag_of(0x17, 0x3E8) == '"17-3e8"'
