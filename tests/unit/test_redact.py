"""Secrets are blanked wherever text enters a report or a log line; ordinary output is not."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.domain.machines.tokens import new_token
from nodeagent.wire import joinstring
from nodeagent.wire.protocol import ItemReport
from nodeagent.wire.redact import MASK, MIN_MASKED_CHARS, RedactingFilter, mask_values, redact

CORPUS = Path(__file__).resolve().parents[1] / "data" / "redact_corpus.txt"
KEY = """-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRj9xV8RsbwtYmF1l2fN0oAoGCCqGSM49
-----END EC PRIVATE KEY-----"""
KUBECONFIG = """users:
- name: admin
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0t
    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.payload.sig
"""


@pytest.mark.parametrize("secret", [
    new_token("join"), new_token("machine"), new_token("admin"), new_token("reader"),
    joinstring.JoinString("https://c:8080", new_token("join"), "sha256:" + "a" * 64).encode(),
], ids=["join-token", "machine-credential", "admin-token", "reader-token", "join-string"])
def test_this_projects_tokens_and_join_strings_are_blanked(secret: str) -> None:
    assert redact(f"joining with {secret} now") == f"joining with {MASK} now"


def test_a_private_key_block_goes_whole_even_when_cut_off() -> None:
    assert redact(f"wrote\n{KEY}\ndone") == f"wrote\n{MASK}\ndone"
    assert redact("tail: -----BEGIN RSA PRIVATE KEY-----\nMIIEow") == f"tail: {MASK}"


def test_kubeconfig_secrets_lose_their_values_but_keep_their_keys() -> None:
    cleaned = redact(KUBECONFIG)
    assert "LS0t" not in cleaned and "eyJhbG" not in cleaned
    assert f"client-key-data: {MASK}" in cleaned and f"token: {MASK}" in cleaned
    assert "name: admin" in cleaned


def test_bearer_tokens_and_password_fields_are_blanked() -> None:
    assert redact("curl -H 'Authorization: Bearer abc.def.ghi123'") == \
        f"curl -H 'Authorization: Bearer {MASK}'"
    assert redact('{"password": "hunter22"}') == f'{{"password": "{MASK}"}}'


def test_ordinary_output_is_left_alone() -> None:
    text = "apt-get install -y kubelet=1.30.2\nSetting up kubelet (1.30.2) ...\nmachine_id: 42"
    assert redact(text) == text


def test_an_item_report_never_carries_a_secret() -> None:
    token = new_token("join")
    report = ItemReport(item="kubeadm-join", fingerprint="f", phase="deploy", status="failed",
                        attempt=1, started_at=0, output=f"kubeadm join --token {token}",
                        error=f"bad key\n{KEY}")
    assert token not in report.output and "PRIVATE" not in report.error
    assert report.output == f"kubeadm join --token {MASK}"


def test_log_lines_are_redacted_arguments_included(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("redact-test")
    token = new_token("machine")
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO, logger="redact-test"):
        logger.info("registered with %s", token)
    assert caplog.messages == [f"registered with {MASK}"]


def test_values_are_masked_wherever_they_appear_the_longest_first() -> None:
    token, longer = "abcdef.0123456789abcdef", "abcdef.0123456789abcdef-extra"
    text = f"kubeadm join --token {token} --key {longer}\n{token}"
    assert mask_values(text, [token, longer]) == f"kubeadm join --token {MASK} --key {MASK}\n{MASK}"


def test_a_value_too_short_to_mask_leaves_unrelated_text_alone() -> None:
    short = "x" * (MIN_MASKED_CHARS - 1)
    text = f"role admin, pin 1234, {short}"
    assert mask_values(text, ["admin", "1234", short]) == text
    assert mask_values(f"{short}x", [f"{short}x"]) == MASK


def test_a_text_cut_in_the_middle_of_a_value_shows_none_of_its_end() -> None:
    """An output tail may start anywhere; an end too short to tell is left."""
    value = "0f3a9c77b1e2"
    assert mask_values(f"{value[4:]} uploaded", [value]) == f"{MASK} uploaded"
    assert mask_values(f"{value[-MIN_MASKED_CHARS + 1:]} ok", [value]) == \
        f"{value[-MIN_MASKED_CHARS + 1:]} ok"


@dataclass(frozen=True)
class Case:
    """A piece of real output, what must be gone from it and what must stay."""

    text: str
    gone: tuple[str, ...]
    kept: tuple[str, ...]


def corpus() -> list[Case]:
    """The cases of tests/data/redact_corpus.txt (its head says how they are written)."""
    cases = []
    for block in CORPUS.read_text().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        if not lines:
            continue
        text = [line for line in lines if not line.startswith(("- ", "+ "))]
        cases.append(Case("\n".join(text),
                          tuple(line[2:] for line in lines if line.startswith("- ")),
                          tuple(line[2:] for line in lines if line.startswith("+ "))))
    return cases


@pytest.mark.parametrize("case", corpus(), ids=lambda case: case.text[:50])
def test_real_output_loses_its_secrets_and_keeps_the_rest(case: Case) -> None:
    cleaned = redact(case.text)
    assert [value for value in case.gone if value in cleaned] == []
    assert [text for text in case.kept if text not in cleaned] == []
    if not case.gone:
        assert cleaned == case.text
