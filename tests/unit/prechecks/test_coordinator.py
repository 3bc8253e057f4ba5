from __future__ import annotations

import pytest

from nodeagent.host import Host
from nodeagent.prechecks import coordinator
from nodeagent.prechecks.coordinator import hosts_file_lookup, resolve
from nodeagent.wire.protocol import Status
from tests.support.roots import MakeContext, RootTree

HOSTS = """\
127.0.0.1   localhost
# 10.0.0.9  coordinator.example
10.0.0.5    coordinator.example coord   # the cluster's coordinator
fd00::5     Coordinator.Example
10.0.0.6
10.0.0.7    other.example
"""


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_hosts_file_lookup_matches_names_and_aliases_case_insensitively() -> None:
    assert hosts_file_lookup(HOSTS, "coordinator.example") == ["10.0.0.5", "fd00::5"]
    assert hosts_file_lookup(HOSTS, "COORD") == ["10.0.0.5"]


def test_hosts_file_lookup_ignores_comments_and_partial_names() -> None:
    assert hosts_file_lookup(HOSTS, "coordinator") == []
    assert hosts_file_lookup(HOSTS, "the") == []
    assert hosts_file_lookup(HOSTS, "10.0.0.6") == []
    assert hosts_file_lookup(None, "coordinator.example") == []


async def test_resolve_prefers_literals_then_the_roots_hosts_file(root_tree: RootTree) -> None:
    root_tree.write("/etc/hosts", HOSTS)
    host = Host(root_tree.path)
    assert await resolve(host, "10.1.2.3", 1.0) == ["10.1.2.3"]
    assert await resolve(host, "coord", 1.0) == ["10.0.0.5"]


async def test_skips_without_a_coordinator_url(make_ctx: MakeContext) -> None:
    outcome = await coordinator.run(make_ctx())
    assert outcome.status is Status.SKIP
    assert outcome.message == "no coordinator URL configured (coordinator.url in the config file)"


@pytest.mark.parametrize("resolv_conf", [None, "search example.com\n"])
async def test_unresolvable_name_names_the_name(
    resolv_conf: str | None, root_tree: RootTree, make_ctx: MakeContext
) -> None:
    # No nameserver to ask: resolution fails before any packet is sent.
    root_tree.write("/etc/hosts", HOSTS)
    if resolv_conf is not None:
        root_tree.write("/etc/resolv.conf", resolv_conf)
    ctx = make_ctx(coordinator={"url": "https://missing.example:8443"})
    outcome = await coordinator.run(ctx)
    assert outcome.status is Status.FAIL
    assert outcome.message.startswith("cannot resolve missing.example: ")
    assert outcome.remedy == "check the nameservers in /etc/resolv.conf and that the name exists"
    assert outcome.data["port"] == 8443
