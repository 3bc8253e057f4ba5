"""A reissue token names the machine it is bound to, and is blanked wherever a log or an item's
output would show it, as every other token of this project is."""

from __future__ import annotations

from coordinator.domain.tokens import new_reissue_token, reissued_machine
from nodeagent.redact import MASK, redact


def test_a_reissue_token_names_its_machine_and_no_other_token_does() -> None:
    token = new_reissue_token("3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11")
    assert reissued_machine(token) == "3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11"
    assert reissued_machine("join_" + token[7:]) is None
    assert reissued_machine("rejoin_") is None and reissued_machine("rejoin_x_") is None


def test_a_reissue_token_is_redacted_whole() -> None:
    token = new_reissue_token("3f2a0c1e-7d7b-4a0e-9d7e-6c1f3b0a2e11")
    assert redact(f"registering with {token} now") == f"registering with {MASK} now"
