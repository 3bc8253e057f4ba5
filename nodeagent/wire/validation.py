"""Load YAML/JSON documents into pydantic models, reporting every problem with its path and line.

Shared by the agent's config file and the coordinator's cluster specs so that both
name the field and line the same way (e.g. `machineTypes.worker[3].action.argv: required`).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, PydanticUserError, ValidationError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    line: int | None = None

    def text(self, source: str | None = None) -> str:
        """The problem as one line: where (file and line), the field, what is wrong."""
        where = ""
        if source and self.line:
            where = f"{source}:{self.line}: "
        elif source:
            where = f"{source}: "
        elif self.line:
            where = f"line {self.line}: "
        field = f"{self.path}: " if self.path else ""
        return f"{where}{field}{self.message}"


class InvalidDocument(Exception):
    """Raised with every problem found, in the order of their lines (as the reader meets
    them, whichever check found them); nothing was accepted."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = sorted(problems, key=lambda problem: problem.line or 0)
        self.source = source
        super().__init__("\n".join(p.text(source) for p in self.problems))


def format_path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(error: dict[str, Any], model: type[BaseModel] | None) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field" + _near(error["loc"], model)
    msg = str(error["msg"])
    return msg.removeprefix("Value error, ")


def _near(loc: tuple[Any, ...], model: type[BaseModel] | None) -> str:
    """What an unknown field's writer meant: the close field name of its mapping (`phse`:
    phase), else the names that mapping takes; "" where the schema does not say."""
    known = _fields_at(model, loc[:-1]) if model is not None else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"; did you mean {close[0]}?"
    return f" (known: {', '.join(known)})" if known else ""


@functools.cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    try:
        return model.model_json_schema(by_alias=True)
    except PydanticUserError:  # a model no JSON schema can describe: no names to offer
        return {}


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names (as written) the mapping at loc may hold, from model's JSON schema,
    loc as pydantic has it (a tagged union's tag included)."""
    schema = _schema(model)
    defs = schema.get("$defs", {})
    node = schema
    for part in loc:
        node = _resolved(node, defs)
        tags = node.get("discriminator", {}).get("mapping", {})
        if part in node.get("properties", {}):
            node = node["properties"][part]
        elif part in tags:
            node = {"$ref": tags[part]}
        elif isinstance(part, int) and isinstance(node.get("items"), dict):
            node = node["items"]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return []
    return list(_resolved(node, defs).get("properties", {}))


def _resolved(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """node with its $ref followed, and an optional value's one non-null alternative."""
    while True:
        if "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
            continue
        alternatives = [a for a in node.get("anyOf", []) if a.get("type") != "null"]
        if len(alternatives) == 1 and "anyOf" in node:
            node = alternatives[0]
            continue
        return node


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Line of the deepest node along loc that exists in the YAML tree (1-based)."""
    best = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    best = key.start_mark.line + 1
                    node = value
                    break
            else:
                return best
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return best
            node = node.value[part]
            best = node.start_mark.line + 1
        else:
            return best
    return best


def _user_path(loc: tuple[Any, ...], data: Any, missing: bool) -> tuple[Any, ...]:
    """Drop components the user never wrote, such as a tagged union's tag ('exec' in
    action.exec.argv), by walking loc through the input. Only a missing field's own name
    may be absent from the input."""
    kept: list[Any] = []
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(data, dict):
            if part in data:
                data = data[part]
            elif not (last and missing):
                continue
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            data = None
        kept.append(part)
    return tuple(kept)


def problems_from(error: ValidationError, tree: yaml.Node | None = None,
                  data: Any = None, model: type[BaseModel] | None = None) -> list[Problem]:
    """Each of error's problems where it is; model (what was validated) names the field an
    unknown one was meant to be."""
    problems = []
    for err in error.errors():
        loc = _user_path(tuple(err["loc"]), data, err["type"] == "missing")
        problems.append(Problem(format_path(loc), _message(err, model), _line_of(tree, loc)))
    return problems


MAX_NESTING = 64  # levels of mappings and lists a document may have; real ones have a dozen
TOO_DEEP = Problem("", f"nested deeper than {MAX_NESTING} levels")


def too_deep(data: Any) -> Problem | None:
    """A problem when data nests more than MAX_NESTING levels: documents from outside are
    refused before anything recursive (validation, storing, rendering) walks them. Each
    container is visited once, so shared YAML anchors cost nothing more."""
    stack, seen = [(data, 1)], set()
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list) or id(node) in seen:
            continue
        if depth > MAX_NESTING:
            return TOO_DEEP
        seen.add(id(node))
        stack += [(child, depth + 1) for child in (node.values() if isinstance(node, dict)
                                                   else node)]
    return None


def parse_yaml(text: str, source: str | None = None) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML (or JSON) document, keeping the node tree for line numbers."""
    try:
        tree = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except RecursionError:
        raise InvalidDocument([TOO_DEEP], source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        raise InvalidDocument(
            [Problem("", f"not valid YAML: {exc.problem}", line)], source
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidDocument([Problem("", f"not valid YAML: {exc}")], source) from None
    problem = too_deep(data)
    if problem is not None:
        raise InvalidDocument([problem], source)
    return data, tree


# Rules a document must meet besides its model's: each problem found is where it is (keys as
# written, list indexes) and why, e.g. (("machineTypes", "worker", 0, "action", "argv", 1), ...).
Rules = Callable[[M], Iterable[tuple[tuple[Any, ...], str]]]


def load_model(model: type[M], text: str, source: str | None = None,
               rules: Rules[M] | None = None) -> M:
    """Parse and validate text as model, then against rules (those that need the whole
    document), or raise InvalidDocument naming every problem with its line."""
    data, tree = parse_yaml(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidDocument([Problem("", "expected a mapping at the top level", 1)], source)
    loaded = validate(model, data, tree, source)
    problems = [Problem(format_path(where), why, _line_of(tree, where))
                for where, why in (rules(loaded) if rules else ())]
    if problems:
        raise InvalidDocument(problems, source)
    return loaded


def validate(model: type[M], data: Any, tree: yaml.Node | None = None,
             source: str | None = None) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidDocument(problems_from(exc, tree, data, model), source) from None
    except UnicodeEncodeError:  # a JSON \udXXX escape standing alone: no character at all
        raise InvalidDocument([Problem("", "a text holds a lone surrogate (\\ud800-\\udfff): "
                                           "not a Unicode character")], source) from None
