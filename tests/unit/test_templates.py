"""${dotted.name} rendering for file templates and exec arguments, and the names a text's
placeholders refer to (what the coordinator checks a spec against)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.wire.templates import TemplateError, placeholders, render

VALUES = {"cluster.name": "edge-1", "machine.ip": "10.0.0.5", "managers": "10.0.0.1,10.0.0.2"}


def test_dotted_and_plain_names_are_substituted() -> None:
    text = "server ${machine.ip} in ${cluster.name} joins ${managers}"
    assert render(text, VALUES) == "server 10.0.0.5 in edge-1 joins 10.0.0.1,10.0.0.2"


def test_double_dollar_is_a_literal_dollar() -> None:
    assert render("cost $$5, shell $${HOME}", VALUES) == "cost $5, shell ${HOME}"


def test_a_bare_dollar_is_left_for_the_shell() -> None:
    script = 'for f in "$@"; do echo $1 $HOME $! $; done'
    assert render(script, VALUES) == script


def test_unknown_name_is_an_error_naming_it_and_the_known_ones() -> None:
    with pytest.raises(TemplateError) as caught:
        render("join ${cluster.nmae}", VALUES)
    message = str(caught.value)
    assert "${cluster.nmae}" in message
    assert "cluster.name, machine.ip, managers" in message


def test_a_shell_variable_in_braces_is_told_its_escape() -> None:
    """A spec stored before its placeholders were checked reaches the node as it is: the
    item's error says what the coordinator's refusal says."""
    with pytest.raises(TemplateError) as caught:
        render("ls ${HOME}", VALUES)
    assert str(caught.value).startswith("unknown template value ${HOME}; if it is the "
                                        "shell's, write $${HOME}; known: cluster.name")


def test_an_unknown_name_with_no_values_says_none_are_known() -> None:
    with pytest.raises(TemplateError, match="known: none"):
        render("${x}", {})


@pytest.mark.parametrize("text", ["${}", "a ${cluster name}", "${var:-default}", "${.x}"])
def test_a_malformed_placeholder_is_an_error_quoting_it(text: str) -> None:
    with pytest.raises(TemplateError, match="malformed placeholder") as caught:
        render("ok ${cluster.name} " + text, VALUES)
    assert repr(text[text.index("${"):])[1:-1] in str(caught.value)


def test_values_are_not_rendered_again() -> None:
    assert render("${a}", {"a": "${b} $$"}) == "${b} $$"


@given(st.text())
def test_escaping_every_dollar_renders_any_text_verbatim(text: str) -> None:
    assert render(text.replace("$", "$$"), VALUES) == text


@given(st.text().filter(lambda t: "$" not in t))
def test_text_without_dollars_is_unchanged(text: str) -> None:
    assert render(text, {}) == text


def test_placeholders_are_the_names_in_order_escapes_and_bare_dollars_aside() -> None:
    text = "${a.b} $$ $${HOME} $HOME $1 ${c} ${a.b}"
    assert placeholders(text) == ["a.b", "c", "a.b"]


@pytest.mark.parametrize("text", ["${}", "a ${cluster name}", "${var:-default}", "${.x}"])
def test_a_malformed_placeholder_is_named_as_render_names_it(text: str) -> None:
    with pytest.raises(TemplateError) as listed:
        placeholders(text)
    with pytest.raises(TemplateError) as rendered:
        render(text, VALUES)
    assert str(listed.value) == str(rendered.value)


@given(st.text(alphabet="${}ab.-_ 1"))
def test_the_names_placeholders_finds_are_all_render_needs(text: str) -> None:
    """What the coordinator checks before storing a spec is what the node fills in: a text
    whose placeholders are all known renders; one that is malformed fails both ways."""
    try:
        names = placeholders(text)
    except TemplateError:
        with pytest.raises(TemplateError):
            render(text, {})
        return
    render(text, dict.fromkeys(names, "v"))
