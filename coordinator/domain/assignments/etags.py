"""An assignment's entity tag, and when a long-poll may wait: the rule that keeps a generation
from ever meaning two things.

A machine's generation grows with every change its agent must see, but only within one state
of the store: a restore of an older backup (or a pivot's import, a database rebuilt from a
snapshot) puts generations back that the agent may already hold, with other content. So the
store mints an epoch, a random id, when it is made and again whenever it imports a snapshot,
and the tag names both: `W/"EPOCH-GENERATION"`. A tag of another epoch never matches, and
its agent is answered at once, as is one ahead of the machine's generation (the store went
back). Both are read in the one lookup every long-poll starts with (Store.machine_version,
kept between polls by service/versions.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Version:
    """Which assignment of a machine: the store's epoch and the machine's generation in it."""

    epoch: str
    generation: int

    @property
    def value(self) -> str:
        """The tag's opaque value, as If-None-Match carries it back (without W/ and quotes)."""
        return f"{self.epoch}-{self.generation}"

    @property
    def tag(self) -> str:
        """The ETag header. Weak: an assignment's values (peers' addresses) may be rendered
        anew within one generation."""
        return f'W/"{self.value}"'


def new_epoch() -> str:
    """A store's epoch: random, so that no two states of any store share one."""
    return secrets.token_hex(8)


def may_wait(current: Version, after: int, held: Collection[str]) -> bool:
    """Whether a long-poll waits for news rather than being answered at once: only when its
    agent holds the machine's current generation (`after`) of this epoch. One behind has
    something new; one ahead, or whose tag names another epoch, holds what another state of
    the store said. held: the tag values of If-None-Match; one that names no epoch (an agent
    from before epochs sends its bare generation, and one that holds nothing sends none) is
    taken at its generation."""
    if after != current.generation:
        return False
    named = {value.rpartition("-")[0] for value in held if "-" in value}
    return not named or current.epoch in named


def not_modified(current: Version, held: Collection[str]) -> bool:
    """Whether a poll that waited for nothing is answered 304 (no body, no read): its tag is
    the current one; or, from an agent before epochs, its bare generation (that agent drops
    an answer of the generation it holds in any case)."""
    return current.value in held or str(current.generation) in held
