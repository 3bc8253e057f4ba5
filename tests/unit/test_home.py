"""The agent's decisions about which coordinator to follow (nodeagent/home.py): which target an
assignment names, whether it is elsewhere, when to ask the coordinator moved from, whether to go
back; and the home kept in the state dir."""

from __future__ import annotations

from pathlib import Path

from nodeagent.home import (
    HOME_FILE,
    Home,
    Place,
    Target,
    elsewhere,
    fallback_due,
    goes_back,
    load_home,
    moved,
    refusal,
    save_home,
    target_of,
)

OLD = Place(("https://old:8443",), "OLD CA")
NEW = Place(("https://new:8443", "https://new-2:8443"), "NEW CA")
PIN = "sha256:" + "a" * 64


def assignment(target: object) -> dict[str, object]:
    return {"machine_id": "m", "generation": 3, "move_target": target}


def test_the_target_an_assignment_names_is_read_and_anything_else_is_no_target() -> None:
    named = target_of(assignment({"urls": ["https://new:8443/"], "ca_pin": PIN, "since": 5}))
    assert named == Target(("https://new:8443",), PIN, 5.0)
    assert target_of({"generation": 3}) is None  # an older coordinator's assignment
    for bad in (None, "https://new", {"urls": []}, {"urls": ["ftp://x"]},
                {"urls": ["https://new"], "ca_pin": 7}, {"urls": "https://new"}):
        assert target_of(assignment(bad)) is None, bad


def test_a_target_is_followed_only_when_every_url_is_https_and_its_ca_is_pinned() -> None:
    """The credential goes to whichever replica answers: one plain-HTTP URL among them, or no
    pin, and it could go out in clear text or to whoever answers."""
    assert refusal(Target(NEW.urls, PIN)) is None
    mixed = refusal(Target(("https://new:8443", "http://new-2:8080"), PIN)) or ""
    assert "http://new-2:8080 is not https" in mixed and "clear text" in mixed
    assert "http://new:8080 is not https" in (refusal(Target(("http://new:8080",), None)) or "")
    assert "names no CA pin" in (refusal(Target(NEW.urls, None)) or "")


def test_a_target_naming_any_replica_of_the_coordinator_talked_to_is_no_move() -> None:
    here = Target(("https://new-2:8443/",), PIN)
    assert elsewhere(here, NEW.urls) is None
    assert elsewhere(None, NEW.urls) is None
    away = Target(("https://new:8443",), PIN)
    assert elsewhere(away, OLD.urls) == away


def test_the_coordinator_moved_from_is_asked_only_after_the_new_one_was_silent_long() -> None:
    home = Home(NEW, OLD, 100.0)
    assert not fallback_due(home, silent_for=599, after=600)
    assert fallback_due(home, silent_for=600, after=600)
    assert not fallback_due(Home(NEW, None, 100.0), silent_for=10_000, after=600)  # nowhere back
    assert not fallback_due(None, silent_for=10_000, after=600)  # never moved


def test_the_agent_goes_back_unless_the_old_coordinator_still_names_the_new_one() -> None:
    home = Home(NEW, OLD, 100.0)
    assert goes_back(None, home)  # the move was rolled back
    assert not goes_back(Target(("https://new:8443",), PIN), home)  # the new one is merely down
    assert goes_back(Target(("https://third:8443",), PIN), home)  # followed from the old one


def test_a_move_keeps_where_it_came_from_and_a_move_back_keeps_nothing() -> None:
    there = moved(OLD, None, NEW, 10.0)
    assert there == Home(NEW, OLD, 10.0)
    assert moved(there.current, there.previous, OLD, 20.0) == Home(OLD, None, 20.0)
    onward = Place(("https://third:8443",), "THIRD CA")
    assert moved(there.current, there.previous, onward, 30.0) == Home(onward, NEW, 30.0)


def test_the_home_is_kept_0600_and_read_back_and_a_damaged_one_is_none(tmp_path: Path) -> None:
    assert load_home(tmp_path) is None
    home = Home(NEW, OLD, 10.0)
    save_home(tmp_path, home)
    assert load_home(tmp_path) == home
    assert (tmp_path / HOME_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / HOME_FILE).write_text('{"current": {"urls": []}}')
    assert load_home(tmp_path) is None  # the config's coordinator is used then
