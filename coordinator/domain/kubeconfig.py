"""Reading a kubeconfig a manager reported, without ever quoting it: it holds credentials."""

from __future__ import annotations

from typing import Any

import yaml


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """A kubeconfig's YAML (or JSON) as the client library loads it; ValueError saying what is
    wrong, never quoting the document (it holds credentials)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError("not YAML" + (f" (line {mark.line + 1})" if mark else "")) from None
    if not isinstance(document, dict):
        raise ValueError("not a mapping")
    for key in ("clusters", "contexts", "users"):
        if not isinstance(document.get(key), list) or not document[key]:
            raise ValueError(f"no {key}")
    return document


def kubeconfig_problem(text: str) -> str | None:
    """What makes the kubeconfig unusable, or None."""
    try:
        parse_kubeconfig(text)
    except ValueError as exc:
        return str(exc)
    return None
