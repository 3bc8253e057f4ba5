"""Labels in Kubernetes' syntax, each problem naming its label, and kubectl label's way of
changing them."""

from __future__ import annotations

import pytest

from coordinator.domain.labels import change_problems, label_list, label_problems, relabelled


@pytest.mark.parametrize("labels", [
    {"zone": "eu-west-1a"}, {"example.com/rack": "r7"}, {"gpu": ""},
    {"node.kubernetes.io/pool": "big_1.x"}, {"a" * 63: "b" * 63},
])
def test_kubernetes_labels_are_accepted(labels: dict[str, str]) -> None:
    assert label_problems(labels) == []


@pytest.mark.parametrize(("labels", "problem"), [
    ({"": "x"}, "label key '': its name must be 1 to 63 characters"),
    ({"team a": "x"}, "label key 'team a': its name must be 1 to 63 characters"),
    ({"-zone": "x"}, "label key '-zone': its name must be 1 to 63 characters"),
    ({"a" * 64: "x"}, f"label key '{'a' * 64}': its name must be 1 to 63 characters"),
    ({"Example.com/zone": "x"}, "label key 'Example.com/zone': its prefix 'Example.com' must "
     "be a DNS subdomain"),
    ({"/zone": "x"}, "label key '/zone': its prefix '' must be a DNS subdomain"),
    ({"zone": "eu west"}, "label zone: its value 'eu west' must be empty or 1 to 63 characters"),
    ({"zone": "x" * 64}, "label zone: its value"),
])
def test_a_bad_label_is_named_with_what_is_wrong(labels: dict[str, str], problem: str) -> None:
    (found,) = label_problems(labels)
    assert found.startswith(problem)


def test_changes_are_checked_whole_and_a_label_both_set_and_removed_is_refused() -> None:
    assert change_problems({"zone": "a"}, ["rack"]) == []
    assert change_problems({"zone": "a b"}, ["bad key", "zone"]) == [
        "label zone: its value 'a b' must be empty or 1 to 63 characters: letters, digits, '-', "
        "'_' or '.', beginning and ending with a letter or digit",
        "label key 'bad key': its name must be 1 to 63 characters: letters, digits, '-', '_' "
        "or '.', beginning and ending with a letter or digit",
        "label zone is both set and removed: choose one"]


def test_relabelling_sets_overwrites_and_removes_and_a_missing_label_is_nothing_to_remove() -> None:
    labels = relabelled({"zone": "a", "rack": "1", "gpu": ""}, {"zone": "b", "pool": "big"},
                        ["rack", "never-set"])
    assert labels == {"zone": "b", "gpu": "", "pool": "big"}


def test_a_label_list_is_sorted_by_key_whatever_order_the_labels_came_in() -> None:
    assert label_list({"zone": "b", "gpu": "", "pool": "big"}) == "gpu=,pool=big,zone=b"
