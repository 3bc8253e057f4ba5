"""The coordinator check through real components, stage by stage: a dnsmasq serving the
test names, HTTP servers standing in for the coordinator, and a forwarding HTTP proxy.

resolv.conf has no port field, so dnsmasq must listen on port 53: everything runs inside a
network namespace of its own (loopback only), `nodeagent precheck` included, reading a
machine root whose resolv.conf names 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import checks_by_name, precheck_argv
from tests.support.dnsmasq import start_dnsmasq
from tests.support.http import HttpServer, start_health_server, start_proxy
from tests.support.netns import Namespace, namespace

pytestmark = pytest.mark.integration

COORD, PROXY = "coord.test", "proxy.test"
PROXY_ADDRESS = "127.0.0.2"  # loopback too, but not the coordinator's: tells the two apart
CLOSED_PORT = 9  # nothing listens on it in the namespace
PROXY_VARIABLES = {"http_proxy", "https_proxy", "no_proxy", "all_proxy"}


@dataclass
class Site:
    ns: Namespace
    root: Path
    healthy: HttpServer
    unhealthy: HttpServer
    proxy: HttpServer

    def coordinator_check(self, tmp_path: Path, config: dict[str, Any],
                          **environ: str) -> dict[str, Any]:
        """`nodeagent precheck` in the namespace with this config (and these extra
        environment variables, over an environment without any proxy settings);
        returns the coordinator check of its JSON report."""
        config_file = tmp_path / "config.yaml"
        config_file.write_text(json.dumps(config))  # JSON is YAML
        env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARIABLES}
        result = self.ns.run(
            precheck_argv(self.root, "--config", str(config_file), "--output", "json"),
            env={**env, **environ},
        )
        return checks_by_name(result)["coordinator"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("coordinator-site")
    root = tmp / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/resolv.conf").write_text("nameserver 127.0.0.1\n")
    with namespace() as ns:
        start_dnsmasq(ns, tmp / "dnsmasq", {COORD: "127.0.0.1", PROXY: PROXY_ADDRESS})
        yield Site(
            ns,
            root,
            healthy=start_health_server(ns, tmp / "healthy.log", 200),
            unhealthy=start_health_server(ns, tmp / "unhealthy.log", 503),
            proxy=start_proxy(ns, tmp / "proxy.log", upstream="127.0.0.1", bind=PROXY_ADDRESS),
        )


@pytest.fixture
def net(site: Site) -> Site:
    """The site, with its servers' request logs emptied."""
    for server in (site.healthy, site.unhealthy, site.proxy):
        server.clear()
    return site


def coordinator(url: str, **proxy: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"coordinator": {"url": url, "timeout": 1}}
    if proxy:
        config["proxy"] = proxy
    return config


# -- stage by stage, direct ----------------------------------------------------------------

def test_healthy_coordinator_resolved_by_dnsmasq_passes(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url))
    assert check["status"] == "pass", check
    assert check["message"] == f"coordinator at {url} is healthy"
    assert check["data"] == {"url": url, "proxy": None, "host": COORD, "port": net.healthy.port,
                             "addresses": ["127.0.0.1"], "status": 200}
    assert net.healthy.requests() == ["GET /healthz HTTP/1.1"]
    assert net.proxy.requests() == []


def test_unknown_name_fails_at_resolution(net: Site, tmp_path: Path) -> None:
    check = net.coordinator_check(tmp_path, coordinator(f"http://nosuch.test:{net.healthy.port}"))
    assert check["status"] == "fail", check
    # dnsmasq answers NXDOMAIN for its local domain at once: no waiting out a timeout.
    assert re.fullmatch(r"cannot resolve nosuch\.test: The DNS query name does not exist: "
                        r"nosuch\.test\.?", check["message"]), check["message"]
    assert check["remedy"] == "check the nameservers in /etc/resolv.conf and that the name exists"
    assert "addresses" not in check["data"]
    assert check["duration"] < 0.5
    assert net.healthy.requests() == []


def test_nothing_listening_fails_at_the_tcp_connect(net: Site, tmp_path: Path) -> None:
    check = net.coordinator_check(tmp_path, coordinator(f"http://{COORD}:{CLOSED_PORT}"))
    assert check["status"] == "fail", check
    assert check["message"] == (
        f"cannot connect to 127.0.0.1:{CLOSED_PORT} ({COORD}): Connection refused"
    )
    assert check["remedy"].startswith("check routes and firewalls between this node")
    assert check["data"]["addresses"] == ["127.0.0.1"]
    assert "status" not in check["data"]


def test_unhealthy_coordinator_fails_naming_the_http_status(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.unhealthy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url))
    assert check["status"] == "fail", check
    assert check["message"] == f"GET {url}/healthz answered HTTP 503"
    assert check["remedy"] == "check the coordinator's logs; its health endpoint must answer 200"
    assert check["data"]["status"] == 503
    assert net.unhealthy.requests() == ["GET /healthz HTTP/1.1"]


# -- through an HTTP proxy -----------------------------------------------------------------

def assert_went_through_proxy(net: Site, check: dict[str, Any], url: str) -> None:
    proxy_url = f"http://{PROXY}:{net.proxy.port}"
    assert check["status"] == "pass", check
    assert check["message"] == f"coordinator at {url} is healthy via proxy {proxy_url}"
    # Resolution and the TCP stage are the proxy's: the node may not resolve the coordinator.
    assert check["data"]["proxy"] == proxy_url
    assert check["data"]["host"] == PROXY
    assert check["data"]["addresses"] == [PROXY_ADDRESS]
    assert net.proxy.requests() == [f"GET {url}/healthz HTTP/1.1"]  # absolute form
    assert net.healthy.requests() == ["GET /healthz HTTP/1.1"]  # forwarded


def assert_went_direct(net: Site, check: dict[str, Any]) -> None:
    assert check["status"] == "pass", check
    assert check["data"]["proxy"] is None
    assert check["data"]["host"] == COORD
    assert net.proxy.requests() == []
    assert net.healthy.requests() == ["GET /healthz HTTP/1.1"]


def test_configured_proxy_carries_the_request(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url, http=f"http://{PROXY}:{net.proxy.port}"))
    assert_went_through_proxy(net, check, url)


def test_configured_no_proxy_goes_direct(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    config = coordinator(url, http=f"http://{PROXY}:{net.proxy.port}", noProxy=["localhost", ".test"])
    assert_went_direct(net, net.coordinator_check(tmp_path, config))


def test_environment_proxy_is_used_without_a_configured_one(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url),
                                  HTTP_PROXY=f"http://{PROXY}:{net.proxy.port}")
    assert_went_through_proxy(net, check, url)


def test_environment_no_proxy_goes_direct(net: Site, tmp_path: Path) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url),
                                  http_proxy=f"http://{PROXY}:{net.proxy.port}",
                                  NO_PROXY=f"localhost,{COORD}")
    assert_went_direct(net, check)


def test_proxy_that_cannot_reach_the_coordinator_fails_naming_its_answer(
    net: Site, tmp_path: Path
) -> None:
    url = f"http://{COORD}:{CLOSED_PORT}"
    proxy_url = f"http://{PROXY}:{net.proxy.port}"
    check = net.coordinator_check(tmp_path, coordinator(url, http=proxy_url))
    assert check["status"] == "fail", check
    assert check["message"] == f"GET {url}/healthz via proxy {proxy_url} answered HTTP 502"
    assert net.proxy.requests() == [f"GET {url}/healthz HTTP/1.1"]


def test_unknown_proxy_name_fails_at_resolution_naming_the_proxy(
    net: Site, tmp_path: Path
) -> None:
    url = f"http://{COORD}:{net.healthy.port}"
    proxy_url = "http://noproxy.test:3128"
    check = net.coordinator_check(tmp_path, coordinator(url, http=proxy_url))
    assert check["status"] == "fail", check
    assert check["message"].startswith(f"cannot resolve noproxy.test via proxy {proxy_url}: ")
    assert net.healthy.requests() == []
