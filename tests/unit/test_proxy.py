from __future__ import annotations

import pytest

from nodeagent.proxy import bypassed, proxy_for
from nodeagent.wire.protocol import ProxySettings

ENV_PROXY = "http://env-proxy:3128"
CONFIG_PROXY = "http://config-proxy:3128"


def test_no_proxy_anywhere_means_direct() -> None:
    assert proxy_for("https://coordinator.example", ProxySettings(), {}) is None


def test_environment_proxy_by_scheme_in_either_case() -> None:
    env = {"HTTPS_PROXY": ENV_PROXY, "http_proxy": "http://plain:80"}
    assert proxy_for("https://coordinator.example", ProxySettings(), env) == ENV_PROXY
    assert proxy_for("http://coordinator.example", ProxySettings(), env) == "http://plain:80"


def test_lowercase_environment_variable_wins() -> None:
    env = {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}
    assert proxy_for("https://c.example", ProxySettings(), env) == "http://lower:1"


def test_config_overrides_the_environment() -> None:
    config = ProxySettings(https=CONFIG_PROXY)
    env = {"https_proxy": ENV_PROXY, "http_proxy": ENV_PROXY}
    assert proxy_for("https://c.example", config, env) == CONFIG_PROXY
    # Only the scheme the config sets is overridden.
    assert proxy_for("http://c.example", config, env) == ENV_PROXY


def test_no_proxy_from_config_and_environment_both_apply() -> None:
    config = ProxySettings(https=CONFIG_PROXY, no_proxy=[".cluster.local"])
    env = {"no_proxy": "internal.example, 10.0.0.0/8"}
    assert proxy_for("https://api.cluster.local", config, env) is None
    assert proxy_for("https://internal.example:8443", config, env) is None
    assert proxy_for("https://10.1.2.3", config, env) is None
    assert proxy_for("https://outside.example", config, env) == CONFIG_PROXY


@pytest.mark.parametrize(
    ("host", "entries", "expected"),
    [
        ("coord.example.com", ["example.com"], True),
        ("coord.example.com", [".example.com"], True),
        ("example.com", [".example.com"], True),
        ("badexample.com", ["example.com"], False),
        ("COORD.Example.com", ["example.COM"], True),
        ("coord.example.com", ["example.com:8443"], True),
        ("coord.example.com", ["*"], True),
        ("10.0.0.7", ["*"], True),
        ("10.0.0.7", ["10.0.0.0/24"], True),
        ("10.0.1.7", ["10.0.0.0/24"], False),
        ("10.0.0.7", ["10.0.0.7"], True),
        ("10.0.0.7", ["0.7", ".0.7"], False),
        ("fd00::7", ["fd00::/16"], True),
        ("[fd00::7]", ["fd00::7"], True),
        ("coord.example.com", ["10.0.0.0/8", "", "  "], False),
        ("10.0.0.7", ["not/a-cidr"], False),
    ],
)
def test_bypassed(host: str, entries: list[str], expected: bool) -> None:
    assert bypassed(host, entries) is expected


def test_the_nodes_own_proxy_settings_win_field_by_field_over_the_clusters() -> None:
    node = ProxySettings(https="http://node:3128", no_proxy=[".node.local"])
    cluster = ProxySettings(http="http://cluster:80", https="http://cluster:443",
                            no_proxy=[".cluster.local"])
    merged = node.over(cluster)
    assert merged.http == "http://cluster:80"
    assert merged.https == "http://node:3128"
    assert merged.no_proxy == [".node.local", ".cluster.local"]
    assert proxy_for("https://x.cluster.local", merged, {}) is None
    assert ProxySettings().over(ProxySettings()) == ProxySettings()
