"""The codec shared by all backends: what goes in comes back out, exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.model import DrainStage, DrainStatus, ItemProgress, Machine, MachineState
from coordinator.store.codec import dumps, machine_from_doc, machine_to_doc, spec_from_json, spec_to_json
from tests.support.builders import ONE_ITEM, cluster, full_machine

finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)

machines = st.builds(
    Machine,
    id=st.text(min_size=1),
    cluster=st.text(min_size=1),
    hostname=st.text(min_size=1),
    ip=st.none() | st.ip_addresses().map(str),
    state=st.sampled_from(MachineState),
    role=st.sampled_from([None, "manager", "worker"]),
    approved=st.booleans(),
    facts=json_objects,
    precheck=json_objects,
    applied=st.frozensets(st.text()),
    progress=st.none() | st.builds(ItemProgress, item=st.text(), attempt=st.integers(), status=st.text(),
                                   error=st.text(), next_retry_at=st.none() | finite,
                                   updated_at=finite),
    created_at=finite,
    state_since=finite,
    last_seen=finite,
    generation=st.integers(),
    credential_hash=st.text(),
    responding=st.booleans(),
    release=st.text(),
    managers=st.lists(st.text()).map(tuple),
    deploy_order=st.integers(min_value=0),
    post_deploy=st.booleans(),
    drain=st.none() | st.builds(
        DrainStatus, stage=st.sampled_from(DrainStage), started_at=finite, attempt=st.integers(),
        force=st.booleans(), message=st.text(), blocking_pods=st.lists(st.text()).map(tuple),
        blocking_budgets=st.lists(st.text()).map(tuple), evicted=st.integers(),
        uncordoned_at=st.none() | finite),
    kubeconfig=st.text(),
)


def through_json(doc: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(dumps(doc))
    return decoded


@given(machines)
def test_every_machine_survives_a_json_round_trip(m: Machine) -> None:
    back = machine_from_doc(through_json(machine_to_doc(m)))
    assert back == m
    assert type(back.state) is MachineState
    assert isinstance(back.applied, frozenset)
    assert back.progress is None or type(back.progress) is ItemProgress
    assert back.drain is None or type(back.drain.stage) is DrainStage


def test_a_document_is_plain_json_with_sorted_applied_fingerprints() -> None:
    doc = machine_to_doc(full_machine(applied=frozenset({"c", "a", "b"})))
    assert doc["applied"] == ["a", "b", "c"]
    assert doc["state"] == "Deploy"
    assert doc["progress"]["item"] == "kubelet"
    assert through_json(doc) == doc


def test_documents_from_another_model_version_still_decode() -> None:
    """A field added since the document was written takes its default; a dropped one is ignored."""
    doc = machine_to_doc(full_machine())
    del doc["responding"]
    doc["retired_field"] = 1
    doc["progress"]["retired_field"] = 2
    assert machine_from_doc(doc) == full_machine(responding=True)


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        dumps(machine_to_doc(full_machine(facts={"when": object()})))
    with pytest.raises(ValueError):
        dumps({"skew": float("nan")})


def test_cluster_spec_round_trips_through_canonical_json() -> None:
    s = cluster(worker=ONE_ITEM, workerBatchSize=5, ntp={"servers": ["ntp.example"]})
    text = spec_to_json(s)
    assert spec_from_json(text) == s
    assert spec_to_json(spec_from_json(text)) == text
    assert json.loads(text)["settings"]["workerBatchSize"] == 5  # as the operator writes it


def test_equal_specs_give_equal_json_whatever_the_key_order_or_defaults() -> None:
    written = {"release": "1.0.0", "name": "edge", "machineTypes": {}}
    explicit = {"name": "edge", "release": "1.0.0", "machineTypes": {"worker": [], "manager": []},
                "settings": {"workerBatchSize": 50}}
    assert spec_to_json(spec_from_json(json.dumps(written))) == \
        spec_to_json(spec_from_json(json.dumps(explicit)))
