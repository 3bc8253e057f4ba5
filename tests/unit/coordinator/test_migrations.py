"""Both stores number a migration alike: version n of a SQLite file and of a PostgreSQL
database hold the same schema, so an operator, a log line or an issue naming a version means
one thing whichever store it is about."""

from __future__ import annotations

import re

from coordinator.store import postgres_schema, sqlite_schema

# What one store has and the other need not: PostgreSQL's replicas' bookkeeping and the mark of
# its numbering; SQLite's covering index of the machine list and the unique index its
# join_tokens.id is given by an ALTER (PostgreSQL's table declares the column UNIQUE).
OWN = {"postgres": {"table event_ids", "table leader", f"table {postgres_schema.ALIGNED}"},
       "sqlite": {"index machines_listed", "index join_tokens_id"}}

# Where SQLite makes a table again (it cannot drop a column's NOT NULL) and PostgreSQL alters it:
# version -> (what SQLite's script makes, what PostgreSQL's does), the same change.
REBUILT = {14: ({"table join_tokens_15", "index join_tokens_cluster"},
                {"column join_tokens.auto_approve"})}

_MADE = re.compile(r"\b(?:CREATE (?:UNIQUE )?(TABLE|INDEX)|DROP (INDEX)) (\w+)"
                   r"|\bALTER TABLE (\w+) ADD COLUMN (\w+)")


def made(script: str, store: str) -> set[str]:
    """What a migration creates, drops or adds (tables, indexes, columns), but the store's own."""
    found = set()
    for kind, dropped, name, table, column in _MADE.findall(script):
        found.add(f"column {table}.{column}" if table else
                  f"{'drop ' if dropped else ''}{(kind or dropped).lower()} {name}")
    return found - OWN[store]


def test_both_stores_have_as_many_migrations() -> None:
    assert len(postgres_schema.MIGRATIONS) == len(sqlite_schema.MIGRATIONS)


def test_each_migration_has_the_same_number_in_both_stores() -> None:
    """From version 2 on each migration makes the same tables, indexes and columns in both.
    PostgreSQL's first schema declares what SQLite's 1 -> 2 adds (join tokens' columns, admin
    tokens) in its tables, and its 1 -> 2 makes only the mark of its numbering."""
    sqlite, postgres = sqlite_schema.MIGRATIONS, postgres_schema.MIGRATIONS
    first = {name for name in made(sqlite[0] + sqlite[1], "sqlite") if name.startswith("table")}
    assert {name for name in made(postgres[0], "postgres") if name.startswith("table")} == first
    assert made(postgres[1], "postgres") == set()
    for version, (lite, pg) in enumerate(zip(sqlite, postgres, strict=False)):
        if version in REBUILT:
            assert (made(lite, "sqlite"), made(pg, "postgres")) == REBUILT[version]
        elif version >= 2:
            assert (version, made(pg, "postgres")) == (version, made(lite, "sqlite"))

