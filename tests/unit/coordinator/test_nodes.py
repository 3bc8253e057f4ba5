"""Which Node is a machine's: its id label first, its providerID second, never its hostname."""

from __future__ import annotations

from typing import Any

from coordinator.domain.nodes import MACHINE_ID_LABEL, node_of, provider_id


def node(name: str, labels: dict[str, str] | None = None, provider: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"providerID": provider} if provider else {}}


def test_the_node_labelled_with_the_machine_id_is_the_machines_whatever_its_name() -> None:
    nodes = [node("w3"), node("w3.example.net", {MACHINE_ID_LABEL: "m-7"})]
    assert node_of(nodes, "lab", "m-7") == "w3.example.net"


def test_a_node_of_the_same_hostname_without_the_mark_is_not_the_machines() -> None:
    assert node_of([node("w3", {MACHINE_ID_LABEL: "m-other"})], "lab", "m-7") is None


def test_the_provider_id_names_the_node_when_no_label_does_and_the_cluster_must_match() -> None:
    nodes = [node("a", provider=provider_id("other", "m-7")), node("b", provider=provider_id("lab", "m-7"))]
    assert provider_id("lab", "m-7") == "nodeagent://lab/m-7"
    assert node_of(nodes, "lab", "m-7") == "b"
