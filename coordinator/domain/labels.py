"""Labels, cluster-wide (settings.kubernetes.labels) and per machine (set at approval or by
`machines label`): Kubernetes' own syntax, because items hand them to the kubelet
(--node-labels=${machine.labels}) and a label Kubernetes refuses would fail the node's join
long after the operator typed it. Pure: each rule says what is wrong with which label."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SYNTAX = "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"


def key_problem(key: str) -> str | None:
    """What is wrong with key as a label key (None: nothing): [PREFIX/]NAME, the prefix a
    DNS subdomain of at most 253 characters, the name at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _PREFIX.match(prefix)):
        return (f"label key {key!r}: its prefix {prefix!r} must be a DNS subdomain "
                "(lowercase letters, digits, '-' and '.') of at most 253 characters")
    if not (len(name) <= 63 and _NAME.match(name)):
        return f"label key {key!r}: its name must be 1 to 63 characters: {_SYNTAX}"
    return None


def value_problem(key: str, value: str) -> str | None:
    """What is wrong with value as the value of label key (None: nothing)."""
    if value and not (len(value) <= 63 and _NAME.match(value)):
        return (f"label {key}: its value {value!r} must be empty or 1 to 63 characters: "
                f"{_SYNTAX}")
    return None


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """Every problem of labels, each naming its label."""
    return [problem for key, value in labels.items()
            for problem in (key_problem(key) or value_problem(key, value),) if problem]


def checked(labels: dict[str, str]) -> dict[str, str]:
    """labels, or ValueError naming every problem (a spec model's validator: its error names
    the field and line)."""
    problems = label_problems(labels)
    if problems:
        raise ValueError("; ".join(problems))
    return labels


def change_problems(put: Mapping[str, str], remove: Iterable[str]) -> list[str]:
    """Every problem of a change to a machine's labels: labels to set, keys to remove (a
    label both set and removed is ambiguous)."""
    removed = list(remove)
    return [*label_problems(put),
            *(problem for key in removed for problem in (key_problem(key),) if problem),
            *(f"label {key} is both set and removed: choose one" for key in removed
              if key in put)]


def relabelled(labels: Mapping[str, str], put: Mapping[str, str],
               remove: Iterable[str]) -> dict[str, str]:
    """labels with put set and remove removed, kubectl label's way: a removed label the
    machine lacks is nothing to do."""
    removed = set(remove)
    return {**{k: v for k, v in labels.items() if k not in removed}, **put}


def label_list(labels: Mapping[str, str]) -> str:
    """k=v,k2=v2 by key: what the kubelet's --node-labels takes, the same whatever order the
    labels were written or stored in."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
