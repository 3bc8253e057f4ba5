from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.wire.config import AgentConfig, load_config
from nodeagent.wire.protocol import split_host_port
from nodeagent.wire.validation import InvalidDocument


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(InvalidDocument) as caught:
        load_config(path)
    return str(caught.value)


def test_no_path_means_defaults() -> None:
    config = load_config(None)
    assert config == AgentConfig()
    assert config.role == "worker"
    assert config.ntp.max_skew_seconds == 2.0
    assert config.thresholds.min_var_free_gib == 5.0
    assert config.thresholds.check_timeout == 3.0


def test_camel_case_keys_load(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, """\
role: manager
coordinator:
  url: https://coordinator.example:8443
  healthPath: /ready
  timeout: 1.5
ntp:
  servers: [ntp1.example, "10.0.0.1:1123", "[fd00::1]:123"]
  maxSkewSeconds: 0.5
proxy:
  https: http://proxy.example:3128
  noProxy: [.cluster.local, 10.0.0.0/8]
thresholds:
  minVarFreeGiB: 20
  checkTimeout: 5
"""))
    assert config.role == "manager"
    assert config.coordinator.url == "https://coordinator.example:8443"
    assert config.coordinator.health_path == "/ready"
    assert config.ntp.servers == ["ntp1.example", "10.0.0.1:1123", "[fd00::1]:123"]
    assert config.ntp.max_skew_seconds == 0.5
    assert config.proxy.no_proxy == [".cluster.local", "10.0.0.0/8"]
    assert config.thresholds.min_var_free_gib == 20
    assert config.thresholds.check_timeout == 5


def test_bad_value_names_file_line_and_camel_case_field(tmp_path: Path) -> None:
    path = write(tmp_path, "role: worker\nntp:\n  servers: [ntp1.example]\n  maxSkewSeconds: soon\n")
    with pytest.raises(InvalidDocument) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}:4: ntp.maxSkewSeconds: Input should be a valid number, "
        "unable to parse string as a number"
    )


def test_unknown_fields_are_errors_with_their_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "role: worker\nntp:\n  maxSkew: 3\nbogus: 1\n")
    lines = message.splitlines()
    assert lines[0].endswith("config.yaml:3: ntp.maxSkew: unknown field; did you mean "
                             "maxSkewSeconds?")
    assert "config.yaml:4: bogus: unknown field (known: role, join" in lines[1]


def test_snake_case_spelling_of_the_gib_unit_is_unknown(tmp_path: Path) -> None:
    assert error_of(tmp_path, "thresholds:\n  minVarFreeGib: 1\n").endswith(
        ":2: thresholds.minVarFreeGib: unknown field; did you mean minVarFreeGiB?"
    )


def test_bad_role_lists_the_choices(tmp_path: Path) -> None:
    assert error_of(tmp_path, "role: boss\n").endswith(
        ":1: role: Input should be 'manager' or 'worker'"
    )


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "role: worker\nntp:\n  servers: [a, b\n")
    assert message.startswith(f"{tmp_path / 'config.yaml'}:4: not valid YAML: ")


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(InvalidDocument) as caught:
        load_config(missing)
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://coordinator.example", "must start with http:// or https://"),
        ("coordinator.example:8443", "must start with http:// or https://"),
        ("https://", "must name a host, e.g. https://coordinator.example:8443"),
        ("https://:8443/", "must name a host, e.g. https://coordinator.example:8443"),
        ("https://coordinator.example:99999", "port must be a number from 1 to 65535"),
        ("https://coordinator.example:0", "port must be a number from 1 to 65535"),
        ("https://coordinator.example:https", "port must be a number from 1 to 65535"),
    ],
)
def test_bad_coordinator_url_is_rejected(tmp_path: Path, url: str, message: str) -> None:
    assert error_of(tmp_path, f"coordinator:\n  url: '{url}'\n").endswith(
        f":2: coordinator.url: {message}"
    )


def test_good_coordinator_urls_load() -> None:
    for url in ("http://10.0.0.5", "https://[fd00::5]:8443/base", "https://c.example:443"):
        assert AgentConfig.model_validate({"coordinator": {"url": url}}).coordinator.url == url


def test_bad_ntp_server_is_named_by_index_on_its_own_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "ntp:\n  servers:\n    - ntp1.example\n    - ntp2.example:0\n")
    assert message.endswith(
        ":4: ntp.servers[1]: 'ntp2.example:0': port must be a number from 1 to 65535"
    )


def test_out_of_range_numbers_are_rejected(tmp_path: Path) -> None:
    message = error_of(tmp_path, "ntp:\n  timeout: 0\nthresholds:\n  checkTimeout: 500\n")
    assert message.splitlines() == [
        f"{tmp_path / 'config.yaml'}:2: ntp.timeout: Input should be greater than 0",
        f"{tmp_path / 'config.yaml'}:4: thresholds.checkTimeout: "
        "Input should be less than or equal to 120",
    ]


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("ntp.example", ("ntp.example", 123)),
        ("ntp.example:1123", ("ntp.example", 1123)),
        (" 10.0.0.1:124 ", ("10.0.0.1", 124)),
        ("fd00::1", ("fd00::1", 123)),
        ("[fd00::1]", ("fd00::1", 123)),
        ("[fd00::1]:1123", ("fd00::1", 1123)),
    ],
)
def test_split_host_port(server: str, expected: tuple[str, int]) -> None:
    assert split_host_port(server, 123) == expected


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("", "empty server address"),
        ("   ", "empty server address"),
        ("ntp.example:0", "'ntp.example:0': port must be a number from 1 to 65535"),
        ("ntp.example:65536", "'ntp.example:65536': port must be a number from 1 to 65535"),
        ("ntp.example:ntp", "'ntp.example:ntp': port must be a number from 1 to 65535"),
        ("[fd00::1]:x", "'[fd00::1]:x': port must be a number from 1 to 65535"),
        (":123", "':123': no host name or address"),
        ("[]:123", "'[]:123': no host name or address"),
    ],
)
def test_split_host_port_rejects(server: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        split_host_port(server, 123)
    assert str(caught.value) == message


def test_coordinator_replicas_follow_the_join_strings_url_each_once() -> None:
    config = AgentConfig.model_validate({"coordinator": {
        "url": "https://c1.example:8443",
        "urls": ["https://c2.example:8443", "https://c1.example:8443", "https://c3.example"]}})
    assert config.coordinator.all_urls == [
        "https://c1.example:8443", "https://c2.example:8443", "https://c3.example"]


def test_a_bad_replica_url_is_named_by_index(tmp_path: Path) -> None:
    message = error_of(tmp_path, "coordinator:\n  urls:\n    - https://c2.example\n"
                                 "    - c3.example:8443\n")
    assert message.endswith(":4: coordinator.urls[1]: must start with http:// or https://")


def test_the_download_cache_bound_is_in_gib_and_not_negative(tmp_path: Path) -> None:
    assert load_config(None).cache_max_gib == 4
    assert load_config(write(tmp_path, "cacheMaxGiB: 0.5\n")).cache_max_gib == 0.5
    assert error_of(tmp_path, "cacheMaxGiB: -1\n") == (
        f"{tmp_path / 'config.yaml'}:1: cacheMaxGiB: Input should be greater than or equal to 0")
