"""A pivot as a small state machine: moving a live coordinator's state to another coordinator
(`coordinator pivot --to URL`), step by step, each step persisted by the old coordinator before
the next begins, so that running the command again after any interruption resumes from the
step reached, and `--abort` rolls back from any step before Done.

    started -> frozen -> copied -> announced -> done
      frozen:    the old coordinator refuses admin changes (409 naming the pivot)
      copied:    its snapshot was imported into the target (idempotent: same pivot id)
      announced: every assignment carries the target; agents switch to it
      done:      the old coordinator is a read-only copy, refreshed from the target

A target is https with its CA, always: the old coordinator sends it an admin token (at every
refresh of its copy) and the agents their credentials, only over TLS verified against that CA,
never to whoever answers at the URL (`target_problems`).

Pure: no I/O. The service persists `Pivot.to_json()` and the CLI asks `next_step`."""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from coordinator.domain.errors import Conflict
from nodeagent.wire.validation import InvalidDocument, Problem


class Step(StrEnum):
    STARTED = "started"
    FROZEN = "frozen"
    COPIED = "copied"
    ANNOUNCED = "announced"
    DONE = "done"


ORDER = tuple(Step)
DEFAULT_REFRESH_SECONDS = 60.0
HTTPS_ONLY = ("the target must be https:// with its CA: the agents' credentials (and a "
              "pivot's admin token) are sent to it only over TLS verified against that CA")


@dataclass(frozen=True)
class Pivot:
    """The pivot under way (or done) on the old coordinator."""

    id: str
    to_url: str
    # The target's CA certificate. None only in a record from before CAs were required:
    # nothing is sent to such a target until a run of the pivot gives it its CA.
    ca_pem: str | None
    step: Step
    started_at: float
    updated_at: float
    refreshed_at: float | None = None  # the last copy of the target's state, once done

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "step": self.step.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pivot:
        return cls(**{**data, "step": Step(data["step"])})

    @property
    def done(self) -> bool:
        return self.step is Step.DONE


def new_id() -> str:
    return "pv-" + secrets.token_hex(6)


def same_target(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def not_https(url: str) -> str | None:
    """Why url may not be a pivot's or a move's target (None: it is https)."""
    return None if url.lower().startswith("https://") else f"{url}: {HTTPS_ONLY}"


def not_a_certificate(pem: str) -> str | None:
    """Why pem is not a CA certificate a target can be verified against (None: it is)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError, TypeError):  # TypeError: text that is not ASCII
        return "not a PEM certificate: give the target's CA certificate (its DATA_DIR/pki/ca.crt)"
    return None


def target_problems(urls: Sequence[tuple[str, str]], ca_field: str,
                    ca: str | None) -> list[Problem]:
    """Why a pivot's or a move's target may not be sent a token or a credential, each problem
    naming its field: a URL (field, url) that is not https://, and its CA (or pin) missing."""
    problems = [Problem(field, why) for field, url in urls if (why := not_https(url)) is not None]
    if not ca:
        problems.append(Problem(ca_field, f"required: {HTTPS_ONLY}"))
    return problems


def unverified(pivot: Pivot) -> str | None:
    """Why the pivot's target cannot be verified (a record from before CAs were required),
    so that nothing is sent to it; None: every connection to it is verified."""
    if not target_problems([("to", pivot.to_url)], "caPem", pivot.ca_pem):
        return None
    remedy = (f"give its CA with `coordinator pivot --to {pivot.to_url} --to-ca FILE`"
              if pivot.to_url.startswith("https://") else "it is plain HTTP")
    return f"pivot {pivot.id} to {pivot.to_url} has no CA to verify it by ({remedy}): {HTTPS_ONLY}"


def begin(current: Pivot | None, to_url: str, ca_pem: str | None, now: float,
          pivot_id: str | None = None) -> Pivot:
    """The pivot to run: the one under way when it goes to the same target (resumed from its
    step; one recorded without a CA takes this one), a new one when none is; InvalidDocument
    for a target that is not https with its CA, Conflict when one to another target is under
    way or done."""
    problems = target_problems([("to", to_url)], "caPem", ca_pem)
    if problems:
        raise InvalidDocument(problems)
    if current is not None:
        if not same_target(current.to_url, to_url):
            raise Conflict(f"pivot {current.id} to {current.to_url} is {current.step.value}: "
                           + ("this coordinator has moved there" if current.done else
                              "finish it with `coordinator pivot --to "
                              f"{current.to_url}` or roll it back with `coordinator pivot "
                              "--abort`"))
        if current.ca_pem is None:
            return replace(current, ca_pem=ca_pem)
        if ca_pem != current.ca_pem:
            raise Conflict(f"pivot {current.id} to {current.to_url} was started with another "
                           "CA certificate: abort it first to change it")
        return current
    return Pivot(pivot_id or new_id(), to_url.rstrip("/"), ca_pem, Step.STARTED, now, now)


EMPTY_TARGET = ("a pivot goes to a coordinator that holds no state: set up a new one "
                "(`coordinator init --data-dir NEW_DIR --name HOST`, then `coordinator serve "
                "--data-dir NEW_DIR`) and pivot to it")


def receivable(held: tuple[str, str] | None, occupied: Sequence[str], pivot_id: str | None,
               schema: int | None, own_schema: int) -> bool:
    """Whether a target already holds this pivot's state (True: nothing to import) or holds
    none (False: it takes the import); Conflict saying why it can take neither, and what to do.
    held: the pivot (id, old URL) it imported, if any; occupied: its tables that hold a row;
    schema: the old coordinator's (None: the archive's own rules check it)."""
    if held is not None and pivot_id is not None and held[0] == pivot_id:
        return True
    if schema is not None and schema > own_schema:
        raise Conflict(f"the old coordinator's state has schema version {schema}, newer than "
                       f"the target reads ({own_schema}): upgrade the target to at least the old "
                       "one's version first")
    if held is not None:
        raise Conflict(f"the target already holds the state of pivot {held[0]} (from "
                       f"{held[1]}): {EMPTY_TARGET}")
    if occupied:
        raise Conflict(f"the target already holds a coordinator's state (rows in "
                       f"{', '.join(occupied)}): {EMPTY_TARGET}")
    return False


def next_step(pivot: Pivot) -> Step | None:
    """The step the pivot takes next; None once done."""
    index = ORDER.index(pivot.step)
    return ORDER[index + 1] if index + 1 < len(ORDER) else None


def advance(pivot: Pivot, to: Step, now: float) -> Pivot:
    """The pivot at step `to`: the next step, or the one it is at (a repeated call, after an
    interruption between doing a step and hearing it was recorded, changes nothing)."""
    if to is pivot.step:
        return pivot
    if to is not next_step(pivot):
        raise Conflict(f"pivot {pivot.id} is {pivot.step.value}: its next step is "
                       f"{_name(next_step(pivot))}, not {to.value}")
    return replace(pivot, step=to, updated_at=now)


def check_abort(pivot: Pivot | None) -> Pivot:
    """The pivot an abort rolls back; Conflict when there is none or it is done."""
    if pivot is None:
        raise Conflict("no pivot is under way: nothing to abort")
    if pivot.done:
        raise Conflict(f"pivot {pivot.id} to {pivot.to_url} is done: this coordinator has "
                       "moved there and its agents with it; it cannot be rolled back")
    return pivot


def refused_change(pivot: Pivot | None) -> str | None:
    """Why an admin change is refused while this pivot is under way or done; None: allowed."""
    if pivot is None or pivot.step is Step.STARTED:
        return None
    if pivot.done:
        return moved_text(pivot)
    return (f"pivot {pivot.id} to {pivot.to_url} is under way ({pivot.step.value}): this "
            "coordinator accepts no changes until it is done (`coordinator pivot --to "
            f"{pivot.to_url}`) or rolled back (`coordinator pivot --abort`)")


def refused_registration(pivot: Pivot | None) -> str | None:
    """Why a machine may not register here while this pivot is under way or done (None: it
    may): the state already copied would not hold it, and its agent would stay behind."""
    if pivot is None or pivot.step is Step.STARTED:
        return None
    if pivot.done:
        return (f"this coordinator has moved to {pivot.to_url} (pivot {pivot.id}): it registers "
                f"no machine; join it to {pivot.to_url} with a join string made there "
                "(`coordinator join-token create CLUSTER` against it)")
    return (f"pivot {pivot.id} to {pivot.to_url} is under way ({pivot.step.value}): this "
            "coordinator registers no machine until it is rolled back; once the pivot is done, "
            f"join it to {pivot.to_url} with a join string made there")


def moved_text(pivot: Pivot) -> str:
    return (f"this coordinator has moved to {pivot.to_url} (pivot {pivot.id}): it is a "
            f"read-only copy; send changes to {pivot.to_url}")


def announces(pivot: Pivot | None) -> bool:
    """Whether agents are told to move (their assignment carries the target)."""
    return pivot is not None and ORDER.index(pivot.step) >= ORDER.index(Step.ANNOUNCED)


def refreshed(pivot: Pivot, now: float) -> Pivot:
    return replace(pivot, refreshed_at=now)


def refresh_due(pivot: Pivot | None, now: float, interval: float) -> bool:
    """Whether the read-only copy should be refreshed from the target now."""
    if pivot is None or not pivot.done:
        return False
    return pivot.refreshed_at is None or now - pivot.refreshed_at >= interval


def _name(step: Step | None) -> str:
    return "none (it is done)" if step is None else step.value


class Sides(Protocol):
    """What running a pivot does to the two coordinators (the CLI does it over HTTP). Every
    operation is idempotent: a pivot interrupted anywhere is run again from its recorded step."""

    def check(self, pivot_id: str | None) -> None:
        """Conflict when the target cannot take this pivot's state (`receivable`): asked
        before the old coordinator is frozen, so that a refusal leaves it taking changes."""

    def begin(self, to_url: str, ca_pem: str | None) -> Pivot:
        """The old coordinator's pivot: the one under way to this target, or a new one."""

    def current(self) -> Pivot | None:
        """The old coordinator's pivot as it recorded it (None: none under way)."""

    def record(self, pivot: Pivot, step: Step) -> Pivot:
        """The old coordinator records that the pivot reached step."""

    def copy(self, pivot: Pivot) -> None:
        """A snapshot of the (frozen) old coordinator imported into the target, once."""

    def announce(self, pivot: Pivot) -> None:
        """The old coordinator's assignments carry the target: its agents move."""

    def settle(self, pivot: Pivot) -> None:
        """Wait (a while) for the agents to show up on the target."""

    def withdraw(self, pivot: Pivot) -> None:
        """Undo announce: agents are no longer told to move (and those that did, come back)."""

    def rollback(self, pivot: Pivot) -> None:
        """The old coordinator forgets the pivot: it takes changes again."""


ACTIONS: dict[Step, Callable[[Sides, Pivot], None]] = {
    Step.FROZEN: lambda sides, pivot: None,  # recording it is what freezes the old one
    Step.COPIED: lambda sides, pivot: sides.copy(pivot),
    Step.ANNOUNCED: lambda sides, pivot: sides.announce(pivot),
    Step.DONE: lambda sides, pivot: sides.settle(pivot),
}


def run(sides: Sides, to_url: str, ca_pem: str | None,
        say: Callable[[Pivot, Step], None] = lambda pivot, step: None) -> Pivot:
    """The pivot taken to done from wherever it was: each step done, then recorded. The target
    is checked first while nothing is frozen yet: a target that cannot take the state is
    refused with no pivot begun (or the one begun left unfrozen)."""
    current = sides.current()
    if current is None or (current.step is Step.STARTED and same_target(current.to_url, to_url)):
        sides.check(None if current is None else current.id)
    pivot = sides.begin(to_url, ca_pem)
    while (step := next_step(pivot)) is not None:
        say(pivot, step)
        ACTIONS[step](sides, pivot)
        pivot = sides.record(pivot, step)
    return pivot


def abort(sides: Sides) -> Pivot:
    """The pivot rolled back from any step before done: agents no longer told to move (and
    brought back), then the old coordinator unfrozen."""
    pivot = check_abort(sides.current())
    if ORDER.index(pivot.step) >= ORDER.index(Step.COPIED):
        sides.withdraw(pivot)  # a crash between announce and its record: withdraw from copied
    sides.rollback(pivot)
    return pivot
