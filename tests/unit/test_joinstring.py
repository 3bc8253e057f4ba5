"""Join strings: round trip, and every way a damaged or too-new one is refused by name."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.config import AgentConfig, load_model
from nodeagent.joinstring import PREFIX, JoinString, parse_join_string
from nodeagent.validation import InvalidDocument


def encode(fields: object) -> str:
    return PREFIX + base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


@given(port=st.integers(1, 65535), token=st.text(min_size=1))
def test_a_join_string_reads_back_as_written(port: int, token: str) -> None:
    join = JoinString(f"https://coordinator.example:{port}", token)
    assert parse_join_string(str(join)) == join
    assert parse_join_string(f"  {join}\n") == join  # pasted with whitespace


@pytest.mark.parametrize(("text", "message"), [
    ("join_abc", "starts with 'nodeagent-join-v1:'"),
    (PREFIX + "!!!", "damaged (not base64url-encoded JSON)"),
    (encode(["url", "token"]), "not a JSON object"),
    (encode({"url": "http://c:8080"}), "has no token"),
    (encode({"url": "ftp://c:8080", "token": "t"}), "url must start with http:// or https://"),
    # What the TLS issue will add: an older agent must not drop a pin silently.
    (encode({"url": "https://c:8443", "token": "t", "caSha256": "ab" * 32}),
     "carries caSha256, which this agent does not support: upgrade the agent"),
])
def test_a_bad_join_string_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_join_string(text)


def test_the_config_takes_url_and_token_from_the_join_string() -> None:
    join = str(JoinString("http://coordinator.test:8080", "join_x"))
    config = load_model(AgentConfig, f"joinString: {join}\n", "config.yaml")
    assert config.coordinator.url == "http://coordinator.test:8080"
    assert config.join_token == "join_x"


def test_an_explicit_coordinator_url_wins_over_the_join_strings() -> None:
    join = str(JoinString("http://old.test:8080", "join_x"))
    text = f"joinString: {join}\ncoordinator: {{url: 'http://new.test:9090'}}\n"
    assert load_model(AgentConfig, text, "c.yaml").coordinator.url == "http://new.test:9090"


@pytest.mark.parametrize(("text", "expected"), [
    ("joinString: nope\n", "c.yaml:1: joinString: a join string starts with"),
    (f"joinString: {JoinString('http://c:1', 'a')}\njoinToken: b\n",
     "joinToken and joinString name different tokens"),
])
def test_config_problems_with_the_join_string_name_the_line(text: str, expected: str) -> None:
    with pytest.raises(InvalidDocument) as raised:
        load_model(AgentConfig, text, "c.yaml")
    assert expected in str(raised.value)
