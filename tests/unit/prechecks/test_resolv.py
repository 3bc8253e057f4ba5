from __future__ import annotations

import pytest

from nodeagent.prechecks import resolv
from nodeagent.prechecks.resolv import ResolvConf, parse
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree

ROTATE_FAILURE = "/etc/resolv.conf sets `options rotate`"


async def check(root_tree: RootTree, make_ctx: MakeContext, text: str | None):
    if text is not None:
        root_tree.write("/etc/resolv.conf", text)
    return await resolv.run(make_ctx())


async def test_plain_resolv_conf_passes(root_tree: RootTree, make_ctx: MakeContext) -> None:
    outcome = await check(root_tree, make_ctx,
                          "search example.com\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n"
                          "options edns0 timeout:1\n")
    assert outcome.status is Status.PASS
    assert outcome.message == "/etc/resolv.conf does not rotate nameservers"
    assert outcome.data == {"nameservers": ["10.0.0.2", "10.0.0.3"], "rotate": False}


async def test_rotate_fails_with_a_remedy(root_tree: RootTree, make_ctx: MakeContext) -> None:
    outcome = await check(root_tree, make_ctx, "nameserver 10.0.0.2\noptions timeout:1 rotate\n")
    assert outcome.status is Status.FAIL
    assert outcome.message == ROTATE_FAILURE
    assert outcome.remedy.startswith("remove `rotate` from the options line of /etc/resolv.conf")
    assert outcome.data == {"nameservers": ["10.0.0.2"], "rotate": True}


async def test_rotate_without_nameservers_still_fails(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    # dnspython refuses such a file ("no nameservers") and the rotate option was lost.
    outcome = await check(root_tree, make_ctx, "options rotate\n")
    assert outcome.status is Status.FAIL
    assert outcome.message == ROTATE_FAILURE
    assert outcome.data == {"nameservers": [], "rotate": True}


async def test_no_nameserver_warns_that_lookups_go_to_localhost(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    outcome = await check(root_tree, make_ctx, "# generated\nsearch example.com\n")
    assert outcome.status is Status.WARN
    assert outcome.message == "/etc/resolv.conf lists no nameserver, so lookups go to 127.0.0.1"
    assert outcome.remedy == "add `nameserver` lines for your DNS servers to /etc/resolv.conf"
    assert "missing" not in outcome.message


async def test_missing_file_warns(make_ctx: MakeContext) -> None:
    outcome = await resolv.run(make_ctx())
    assert outcome.status is Status.WARN
    assert outcome.message == "/etc/resolv.conf is missing or unreadable"
    assert outcome.remedy == "create /etc/resolv.conf with your nameservers"


async def test_a_directory_in_its_place_is_unreadable(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    root_tree.mkdir("/etc/resolv.conf")
    outcome = await resolv.run(make_ctx())
    assert outcome.status is Status.WARN
    assert outcome.message == "/etc/resolv.conf is missing or unreadable"


async def test_entries_dnspython_rejects_do_not_crash_the_check(
    root_tree: RootTree, make_ctx: MakeContext
) -> None:
    outcome = await check(root_tree, make_ctx, "nameserver not-an-address\noptions rotate\n")
    assert outcome.status is Status.FAIL
    assert outcome.message == ROTATE_FAILURE


@pytest.mark.parametrize(
    "text",
    [
        "nameserver 10.0.0.2\n# options rotate\n",
        "nameserver 10.0.0.2\n; options rotate\n",
        "nameserver 10.0.0.2\noptions rotated\n",
        "nameserver 10.0.0.2\nrotate\n",
    ],
    ids=["hash-comment", "semicolon-comment", "other-option", "no-keyword"],
)
def test_rotate_only_counts_as_an_option(text: str) -> None:
    assert parse(text) == ResolvConf(["10.0.0.2"], rotate=False)


def test_every_options_line_counts() -> None:
    text = "options ndots:2\n  nameserver 10.0.0.2\noptions\trotate\nnameserver\n"
    assert parse(text) == ResolvConf(["10.0.0.2"], rotate=True)
