"""Where the agent's coordinator is, once it has moved (a pivot): its URLs and the CA
it is verified by, kept in the state dir (coordinator.json, 0600, written atomically: both
or neither), with the coordinator it moved from as a fallback.

Precedence: coordinator.json when it is there; else the config file's coordinator.url(s) and
CA (caFile, or the one the join string pinned). The daemon and a phase's child process (for
its artifact downloads) read the same file, so both talk to the same coordinator.

Everything here but load_home/save_home is pure: the decisions the daemon's Retarget acts on."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nodeagent.atomic import atomic_write
from nodeagent.wire.endpoint import Endpoint

HOME_FILE = "coordinator.json"  # in the state dir


@dataclass(frozen=True)
class Target:
    """The coordinator an assignment tells the agent to move to (its move_target)."""

    urls: tuple[str, ...]
    ca_pin: str | None
    since: float = 0.0


@dataclass(frozen=True)
class Place:
    """A coordinator the agent talks to: its URLs, and the CA to verify it by (None: plain
    HTTP, or the config's CA)."""

    urls: tuple[str, ...]
    ca_pem: str | None = None

    def endpoints(self, proxy: str | None) -> list[Endpoint]:
        return [Endpoint(url, proxy) for url in self.urls]

    def context(self) -> ssl.SSLContext | None:
        """Verify this coordinator against its own CA only (and its certificate's names)."""
        return None if self.ca_pem is None else ssl.create_default_context(cadata=self.ca_pem)


@dataclass(frozen=True)
class Home:
    """The coordinator the agent moved to, when, and the one it moved from (to go back to
    should the move be rolled back: see fallback_due)."""

    current: Place
    previous: Place | None
    since: float


def _normal(url: str) -> str:
    return url.rstrip("/")


def target_of(assignment: Mapping[str, Any]) -> Target | None:
    """The assignment's move target; None when there is none, or it is not one (an agent never
    moves on a document it cannot read)."""
    raw = assignment.get("move_target")
    if not isinstance(raw, dict):
        return None
    urls, pin = raw.get("urls"), raw.get("ca_pin")
    if not isinstance(urls, list) or not urls or not all(
            isinstance(u, str) and u.startswith(("https://", "http://")) for u in urls):
        return None
    if pin is not None and not isinstance(pin, str):
        return None
    since = raw.get("since")
    return Target(tuple(_normal(u) for u in urls), pin,
                  float(since) if isinstance(since, (int, float)) else 0.0)


def refusal(target: Target) -> str | None:
    """Why the agent does not move to target (None: it may check it): every URL it may move to
    is https and the target pins its CA, so that this machine's credential only ever crosses
    TLS verified against that pin, whichever replica answers. An older coordinator could name
    a plain-HTTP or unpinned one."""
    plain = [url for url in target.urls if not url.startswith("https://")]
    if plain:
        return (f"the move target {plain[0]} is not https: this machine's credential would "
                "cross the network in clear text; refusing to move")
    if target.ca_pin is None:
        return (f"the move target {target.urls[0]} names no CA pin: nothing proves who answers "
                "there; refusing to move")
    return None


def is_here(target: Target, urls: Iterable[str]) -> bool:
    """Whether target names the coordinator the agent talks to (any of its replicas)."""
    return bool({_normal(u) for u in target.urls} & {_normal(u) for u in urls})


def elsewhere(target: Target | None, urls: Iterable[str]) -> Target | None:
    """The target to move to: the assignment's, unless it has none or names where the agent
    already is."""
    return None if target is None or is_here(target, urls) else target


def fallback_due(home: Home | None, silent_for: float, after: float) -> bool:
    """Whether to ask the coordinator the agent moved from whether the move still stands: it
    moved, and the new one has not answered for `after` seconds."""
    return home is not None and home.previous is not None and silent_for >= after


def goes_back(previous_names: Target | None, home: Home) -> bool:
    """After fallback_due, with what the previous coordinator's assignment names now: go back
    unless it still names the coordinator the agent moved to (then that one is merely down,
    and the agent waits for it). A target elsewhere is followed from the previous one, as any."""
    return previous_names is None or not is_here(previous_names, home.current.urls)


def moved(current: Place, previous: Place | None, to: Place, now: float) -> Home:
    """The home after a move from current to `to`, previous being the fallback until now. A
    move back to that fallback keeps none: nothing is left to go back to."""
    return Home(to, None if to == previous else current, now)


def load_home(state_dir: Path) -> Home | None:
    """The persisted home; None when there is none (or it is unreadable: the config then says
    where the coordinator is)."""
    try:
        data = json.loads((state_dir / HOME_FILE).read_text())
        previous = data.get("previous")
        return Home(_place(data["current"]), None if previous is None else _place(previous),
                    float(data.get("since", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _place(data: Mapping[str, Any]) -> Place:
    urls = data["urls"]
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        raise ValueError("no URLs")
    return Place(tuple(urls), data.get("ca_pem"))


def save_home(state_dir: Path, home: Home) -> None:
    """Write the home at once (URLs and CA together), 0600, surviving a crash."""
    document = {"current": _plain(home.current),
                "previous": None if home.previous is None else _plain(home.previous),
                "since": home.since}
    atomic_write(state_dir / HOME_FILE, json.dumps(document, indent=1).encode(), mode=0o600)


def _plain(place: Place) -> dict[str, Any]:
    return {**asdict(place), "urls": list(place.urls)}
