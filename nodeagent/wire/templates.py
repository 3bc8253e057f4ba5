"""${cluster.name}-style values in StateItems: file templates, and each exec argument and
environment value on its own (never joined into a shell string, so a value can't inject).

Every `${...}` is ours: a dotted name that must be known, else an error naming it. `$$` is a
literal `$`, so a script passes the shell its own `${var}` as `$${var}`. A bare `$` not
followed by `{` (the shell's `$1`, `$HOME`, `$!`) stays as written, so scripts rarely need
escaping; unbraced names are not placeholders because `$machine.ip.` would be ambiguous.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping


class TemplateError(ValueError):
    pass


_NAME = r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*"


class _Template(string.Template):
    pattern = rf"""
    \$(?:
      (?P<escaped>\$) |
      \{{(?P<braced>{_NAME})\}} |
      (?P<named>(?!)) |
      (?P<invalid>\{{)
    )
    """
    flags = re.VERBOSE


def render(text: str, values: Mapping[str, str]) -> str:
    """Substitute every ${name} from values; `$$` is a literal `$`."""
    try:
        return _Template(text).substitute(values)
    except KeyError as exc:
        known = ", ".join(sorted(values)) or "none"
        raise TemplateError(f"unknown template value ${{{exc.args[0]}}}"
                            f"{shell_hint(exc.args[0])}; known: {known}") from None
    except ValueError:
        placeholders(text)  # raises, naming the malformed one
        raise


def shell_hint(name: str) -> str:
    """What to write instead of an unknown ${name} that looks like the shell's own variable
    (no dot: all but one of ours have one), e.g. `${HOME}`: the escape, since `${...}` is
    ours. "" for a dotted name."""
    return "" if "." in name else f"; if it is the shell's, write $${{{name}}}"


def placeholders(text: str) -> list[str]:
    """The names text's placeholders refer to, in order (a `$$` escape is none), without
    rendering it: what the coordinator checks a spec's items against before storing them.
    Raises TemplateError for a malformed one, as render does."""
    names = []
    for match in _Template.pattern.finditer(text):
        if match.group("invalid") is not None:
            bad = text[match.start():][:40]
            raise TemplateError(
                f"malformed placeholder {bad!r}: use ${{dotted.name}}, or $${{...}} for a literal")
        if match.group("braced") is not None:
            names.append(match.group("braced"))
    return names
