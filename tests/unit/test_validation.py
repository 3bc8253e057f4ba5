from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from nodeagent.wire.validation import InvalidDocument, Problem, format_path, load_model


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    count: int = Field(default=1, ge=1)


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Item] = Field(default_factory=list)
    title: str = ""


def problems_of(text: str) -> list[str]:
    with pytest.raises(InvalidDocument) as caught:
        load_model(Doc, text, "doc.yaml")
    return [p.text("doc.yaml") for p in caught.value.problems]


def test_problem_render_names_source_line_and_field() -> None:
    assert Problem("a.b", "required", 3).text("f.yaml") == "f.yaml:3: a.b: required"
    assert Problem("a.b", "required").text("f.yaml") == "f.yaml: a.b: required"
    assert Problem("a.b", "required", 3).text() == "line 3: a.b: required"
    assert Problem("", "cannot read").text() == "cannot read"


def test_format_path_indexes_lists() -> None:
    assert format_path(("items", 2, "name")) == "items[2].name"
    assert format_path((0, "x")) == "[0].x"


def test_every_problem_is_reported_with_its_own_line() -> None:
    text = "title: ok\nitems:\n  - name: a\n  - count: 0\n    name: b\n  - {}\nextra: 1\n"
    assert problems_of(text) == [
        "doc.yaml:4: items[1].count: Input should be greater than or equal to 1",
        "doc.yaml:6: items[2].name: required",
        "doc.yaml:7: extra: unknown field (known: items, title)",
    ]


def test_problems_come_in_the_order_of_their_lines() -> None:
    """pydantic reports a model's own fields before those of a field it holds: the reader
    of a long spec meets them in the file's order instead."""
    text = "extra: 1\nitems:\n  - {}\ntitle: [1]\n"
    assert problems_of(text) == [
        "doc.yaml:1: extra: unknown field (known: items, title)",
        "doc.yaml:3: items[0].name: required",
        "doc.yaml:4: title: Input should be a valid string",
    ]
    with pytest.raises(InvalidDocument) as caught:
        load_model(Doc, text, "doc.yaml")
    assert str(caught.value).splitlines() == problems_of(text)  # what the API's error says


def test_an_unknown_field_is_told_the_field_it_was_meant_to_be() -> None:
    """A misspelt key names the close field of its own mapping (a list's item's, too),
    else the fields that mapping takes."""
    assert problems_of("titel: x\nitems:\n  - {name: a, cont: 2, zzz: 1}\n") == [
        "doc.yaml:1: titel: unknown field; did you mean title?",
        "doc.yaml:3: items[0].cont: unknown field; did you mean count?",
        "doc.yaml:3: items[0].zzz: unknown field (known: name, count)",
    ]


def test_the_exception_message_lists_every_problem() -> None:
    with pytest.raises(InvalidDocument) as caught:
        load_model(Doc, "title: [1]\nbogus: 2\n", "doc.yaml")
    assert str(caught.value) == (
        "doc.yaml:1: title: Input should be a valid string\n"
        "doc.yaml:2: bogus: unknown field (known: items, title)"
    )
    assert caught.value.source == "doc.yaml"


def test_yaml_syntax_error_reports_its_line() -> None:
    assert problems_of("title: x\nitems: [\n  {name: a\n") == [
        "doc.yaml:4: not valid YAML: expected ',' or '}', but got '<stream end>'"
    ]


def test_top_level_must_be_a_mapping() -> None:
    assert problems_of("- a\n- b\n") == ["doc.yaml:1: expected a mapping at the top level"]


def test_empty_document_is_all_defaults() -> None:
    assert load_model(Doc, "", "doc.yaml") == Doc()
    assert load_model(Doc, "# only a comment\n", "doc.yaml") == Doc()


def test_json_is_yaml_too() -> None:
    assert load_model(Doc, '{"items": [{"name": "a", "count": 2}]}') == Doc(
        items=[Item(name="a", count=2)]
    )
