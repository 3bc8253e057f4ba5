"""What `coordinator restore` tells the operator to run: a restored coordinator served where
its agents look for it, the URL the backup recorded, or, from an older backup, plainly which
URL and address to choose."""

from __future__ import annotations

from coordinator.cli.process import restored_serve_lines


def test_the_recorded_url_is_given_with_the_port_to_listen_on() -> None:
    said = restored_serve_lines("data", False, "https://coord.example:8443", ["coord.example"])
    assert said.splitlines()[0] == ("start it with:   coordinator serve --data-dir data --listen "
                                    "ADDRESS:8443 --advertise-url https://coord.example:8443")
    assert "ADDRESS: the address of this host that coord.example resolves to" in said


def test_an_older_backup_says_which_url_to_choose_from_its_certificate() -> None:
    said = restored_serve_lines("data", True, None, ["coord.example", "10.0.0.5"])
    assert said.splitlines()[0] == ("start it with:   coordinator serve --data-dir data --listen "
                                    "ADDRESS:PORT --advertise-url https://NAME:PORT --store DSN")
    assert "this backup does not record the URL its agents reach it at" in said
    assert "NAME one of its server certificate's names (coord.example, 10.0.0.5)" in said
