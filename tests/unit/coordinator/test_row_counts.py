"""A backup's and a restore's rows per table, as the CLI prints them: one row is singular."""

from __future__ import annotations

from coordinator.cli.plumbing import row_counts


def test_one_row_of_a_table_reads_singular_and_the_others_plural() -> None:
    assert row_counts({"clusters": 1, "join_tokens": 2, "admin_tokens": 1,
                       "cluster_outputs": 0, "machines": 4, "removed_machines": 1}) == (
        "1 cluster, 2 join tokens, 1 admin token, 0 cluster outputs, 4 machines, "
        "1 removed machine")
