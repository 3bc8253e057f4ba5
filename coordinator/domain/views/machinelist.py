"""The rules of `GET /v1/machines`: which machines a query selects, in which order, and which
page of them it answers. They work on a machine's few listed fields (Listed). A store answers
a page in its database, on columns (Store.machine_page): at 10,000 machines reading them all
into Python cost more than a page may take. select() spells the same rules in Python: the
reference a property test holds both databases' answers equal to."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from coordinator.domain.model import POOL, Machine, MachineState
from nodeagent.wire.contract import Role
from nodeagent.wire.validation import InvalidDocument, Problem

SORT_FIELDS = ("hostname", "state", "role", "cluster", "ip", "last_seen", "state_since")
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
REPEATABLE = ("label", "id")
PARAMETERS = ("cluster", "pool", "state", "role", "label", "q", "responding", "id", "sort",
              "limit", "offset")
ROLES: tuple[Role, ...] = ("manager", "worker")


@dataclass(slots=True)
class Listed:
    """What the rules look at of one machine: the fields a store keeps as columns (labels
    as rows of their own), so that its database answers a page by these rules."""

    id: str
    cluster: str
    hostname: str
    ip: str | None
    state: str
    role: str | None
    labels: dict[str, str]
    responding: bool
    last_seen: float
    state_since: float


def listed(machine: Machine) -> Listed:
    return Listed(id=machine.id, cluster=machine.cluster, hostname=machine.hostname,
                  ip=machine.ip, state=machine.state.value, role=machine.role,
                  labels=machine.labels, responding=machine.responding,
                  last_seen=machine.last_seen, state_since=machine.state_since)


@dataclass(frozen=True)
class MachineQuery:
    """A parsed query: None or empty means "any"."""

    cluster: str | None = None
    states: frozenset[str] = frozenset()
    role: str | None = None
    labels: tuple[tuple[str, str | None], ...] = ()  # (key, value) or (key, None): present
    search: str = ""  # lower case
    responding: bool | None = None
    ids: frozenset[str] = frozenset()
    sort: str = "hostname"
    descending: bool = False
    limit: int = DEFAULT_LIMIT
    offset: int = 0


def parse_query(pairs: Iterable[tuple[str, str]]) -> MachineQuery:
    """The query string's (name, value) pairs as a MachineQuery; every bad value, unknown or
    repeated parameter is named in one InvalidDocument (a 422)."""
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    problems: list[Problem] = []
    for name, given in values.items():
        if name not in PARAMETERS:
            problems.append(Problem(name, f"unknown query parameter: known are "
                                          f"{', '.join(PARAMETERS)}"))
        elif len(given) > 1 and name not in REPEATABLE:
            problems.append(Problem(name, "given more than once: only label and id repeat"))
    one = {name: given[0] for name, given in values.items()}
    fields: dict[str, Any] = {"cluster": one.get("cluster") or None,
                              "search": one.get("q", "").strip().lower(),
                              "ids": frozenset(values.get("id", ()))}
    for name, parse in _PARSERS.items():
        if name in one:
            try:
                fields.update(parse(one[name]))
            except ValueError as exc:
                problems.append(Problem(name, str(exc)))
    if one.get("pool", "false") not in ("true", "false"):
        problems.append(Problem("pool", "true (only the pool's machines) or false"))
    elif one.get("pool") == "true":
        if fields["cluster"] is not None:
            problems.append(Problem("pool", "a machine of the pool is of no cluster: give "
                                    "cluster or pool=true, not both"))
        fields["cluster"] = POOL
    try:
        fields["labels"] = tuple(_label(text) for text in values.get("label", ()))
    except ValueError as exc:
        problems.append(Problem("label", str(exc)))
    if problems:
        raise InvalidDocument(problems)
    return MachineQuery(**fields)


def _states(text: str) -> dict[str, Any]:
    known = {s.value.lower(): s.value for s in MachineState}
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n.lower() not in known]
    if unknown or not names:
        raise ValueError(f"unknown state {', '.join(unknown) or '(none given)'}: a comma-separated "
                         f"list of {', '.join(known.values())}")
    return {"states": frozenset(known[n.lower()] for n in names)}


def _role(text: str) -> dict[str, Any]:
    if text not in ROLES:
        raise ValueError(f"must be {' or '.join(ROLES)}")
    return {"role": text}


def _responding(text: str) -> dict[str, Any]:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return {"responding": text.lower() == "true"}


def _sort(text: str) -> dict[str, Any]:
    name = text.removeprefix("-")
    if name not in SORT_FIELDS:
        raise ValueError(f"must be one of {', '.join(SORT_FIELDS)}, with - before it for "
                         "the descending order")
    return {"sort": name, "descending": text.startswith("-")}


def _bounded(name: str, low: int, high: int | None) -> Callable[[str], dict[str, Any]]:
    def parse(text: str) -> dict[str, Any]:
        allowed = f"an integer from {low}" + (f" to {high}" if high is not None else " up")
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"must be {allowed}") from None
        if number < low or (high is not None and number > high):
            raise ValueError(f"must be {allowed}")
        return {name: number}
    return parse


def _label(text: str) -> tuple[str, str | None]:
    key, equals, value = text.partition("=")
    if not key:
        raise ValueError(f"{text!r}: must be key=value, or key for any machine carrying it")
    return key, value if equals else None


_PARSERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "state": _states, "role": _role, "responding": _responding, "sort": _sort,
    "limit": _bounded("limit", 1, MAX_LIMIT), "offset": _bounded("offset", 0, None)}


def filters(query: MachineQuery) -> list[Callable[[Listed], bool]]:
    """One test per filter the query sets: a machine is selected when it passes them all.
    Only the filters set are applied, each over what the one before kept."""
    tests: list[Callable[[Listed], bool]] = []
    if query.cluster is not None:
        tests.append(lambda m: m.cluster == query.cluster)
    if query.states:
        tests.append(lambda m: m.state in query.states)
    if query.role is not None:
        tests.append(lambda m: m.role == query.role)
    if query.responding is not None:
        tests.append(lambda m: m.responding == query.responding)
    if query.ids:
        tests.append(lambda m: m.id in query.ids)
    for key, value in query.labels:
        tests.append(partial(_labelled, key, value))
    if query.search:
        tests.append(lambda m: query.search in m.hostname.lower()
                     or query.search in (m.ip or "").lower())
    return tests


def _labelled(key: str, value: str | None, machine: Listed) -> bool:
    found = machine.labels.get(key)
    return found is not None and (value is None or found == value)


def _key(sort: str) -> Callable[[Listed], tuple[Any, ...]]:
    """The order of a sort field, ties broken by id so that pages never overlap. A missing
    value (no role, no IP yet) sorts as the empty string."""
    def key(machine: Listed) -> tuple[Any, ...]:
        value = getattr(machine, sort)
        return ("" if value is None else value, machine.id)
    return key


def select(query: MachineQuery, machines: Iterable[Listed]) -> tuple[list[Listed], int]:
    """The page of the machines the query selects, in its order, and how many it selects."""
    found = list(machines)
    for test in filters(query):
        found = [m for m in found if test(m)]
    found.sort(key=_key(query.sort), reverse=query.descending)
    return found[query.offset:query.offset + query.limit], len(found)
