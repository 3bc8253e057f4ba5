"""The codec shared by all backends: what goes in comes back out, exactly."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain import model
from coordinator.domain.model import DrainStage, DrainStatus, ItemProgress, Machine, MachineState
from coordinator.store.cipher import Cipher, SecretsKeyError
from coordinator.store.codec import (
    SEALED,
    dumps,
    machine_from_doc,
    machine_to_doc,
    spec_from_json,
    spec_to_json,
)
from tests.support.builders import (
    ONE_ITEM,
    SECRETS,
    TEST_CIPHER,
    cluster,
    full_machine,
    with_secrets,
)

finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
secret_values = st.dictionaries(st.text(), st.text(), max_size=3)
names = st.lists(st.text(), max_size=3).map(tuple)

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
    node=st.none() | st.builds(
        model.NodeStatus, waiting_since=finite, name=st.text(), ready=st.booleans(),
        reason=st.text(), message=st.text(), condition=st.text(),
        registered_at=st.none() | finite, ready_since=st.none() | finite,
        unready_since=st.none() | finite, metadata=st.text(),
        error=st.text()),
    kubeconfig=st.text(),
    labels=st.dictionaries(st.text(), st.text(), max_size=3),
    outputs=secret_values,
    material=st.none() | st.builds(
        model.Material, serial=st.integers(), minter=st.text(), requested_at=finite, items=names,
        values=secret_values, minted_at=st.none() | finite, expires_at=st.none() | finite,
        used_at=st.none() | finite, revoked_at=st.none() | finite),
    minting=st.none() | st.builds(
        model.MintJob, kind=st.sampled_from(["mint", "revoke"]), joiner=st.text(), hostname=st.text(),
        ip=st.text(), role=st.sampled_from(["manager", "worker"]), serial=st.integers(),
        items=names, values=secret_values, done=names),
    waits=names,
)


def through_json(doc: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(dumps(doc))
    return decoded


@given(machines)
def test_every_machine_survives_a_json_round_trip(m: Machine) -> None:
    back = machine_from_doc(through_json(machine_to_doc(m, TEST_CIPHER)), TEST_CIPHER)
    assert back == m
    assert type(back.state) is MachineState
    assert isinstance(back.applied, frozenset)
    assert back.progress is None or type(back.progress) is ItemProgress
    assert back.drain is None or type(back.drain.stage) is DrainStage


def test_a_document_is_plain_json_with_sorted_applied_fingerprints() -> None:
    doc = machine_to_doc(full_machine(applied=frozenset({"c", "a", "b"})), TEST_CIPHER)
    assert doc["applied"] == ["a", "b", "c"]
    assert doc["state"] == "Deploy"
    assert doc["progress"]["item"] == "kubelet"
    assert through_json(doc) == doc


def test_documents_from_another_model_version_still_decode() -> None:
    """A field added since the document was written takes its default; a dropped one is ignored."""
    doc = machine_to_doc(full_machine(), TEST_CIPHER)
    del doc["responding"]
    doc["retired_field"] = 1
    doc["progress"]["retired_field"] = 2
    assert machine_from_doc(doc, TEST_CIPHER) == full_machine(responding=True)


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        dumps(machine_to_doc(full_machine(facts={"when": object()}), TEST_CIPHER))
    with pytest.raises(ValueError):
        dumps({"skew": float("nan")})


# -- secrets at rest -------------------------------------------------------------------------------

def test_secrets_are_sealed_in_one_key_and_nowhere_in_the_clear() -> None:
    machine = with_secrets(full_machine())
    doc = machine_to_doc(machine, TEST_CIPHER)
    text = dumps(doc)
    assert not [secret for secret in SECRETS if secret in text]
    assert "kubeconfig" not in doc and "outputs" not in doc
    assert "values" not in doc["material"] and "values" not in doc["minting"]
    assert doc["material"]["serial"] == 1 and doc["minting"]["joiner"] == "m-9"  # the rest stays
    assert machine_from_doc(json.loads(text), TEST_CIPHER) == machine


def test_a_machine_without_secrets_is_not_sealed() -> None:
    """The hot path: most machines hold no secret, and nothing is encrypted for them."""
    assert SEALED not in machine_to_doc(full_machine(), TEST_CIPHER)
    assert SEALED not in machine_to_doc(full_machine(), None)


def test_a_document_from_before_sealing_decodes_and_is_sealed_when_written_again() -> None:
    machine = with_secrets(full_machine())
    written_before = {**machine_to_doc(full_machine(), None), "kubeconfig": machine.kubeconfig,
                      "outputs": machine.outputs, "material": asdict(machine.material),
                      "minting": asdict(machine.minting)}
    decoded = machine_from_doc(through_json(written_before), TEST_CIPHER)
    assert decoded == machine
    assert SEALED in machine_to_doc(decoded, TEST_CIPHER)


def test_another_key_fails_loudly_naming_its_file() -> None:
    doc = through_json(machine_to_doc(with_secrets(full_machine()), TEST_CIPHER))
    other = Cipher(Cipher.new_key(), "/var/lib/coordinator/secrets.key")
    with pytest.raises(SecretsKeyError, match=re.escape(
            "cannot decrypt the secrets of machine m-1 with the key in "
            "/var/lib/coordinator/secrets.key")):
        machine_from_doc(doc, other)
    with pytest.raises(SecretsKeyError, match="has secrets, and this store has no secrets key"):
        machine_to_doc(with_secrets(full_machine()), None)
    with pytest.raises(SecretsKeyError, match="sealed, and this store has no secrets key"):
        machine_from_doc(doc, None)


def test_sealed_secrets_open_in_their_own_machines_document_only() -> None:
    doc = through_json(machine_to_doc(with_secrets(full_machine("m-1")), TEST_CIPHER))
    other = through_json(machine_to_doc(full_machine("m-2"), TEST_CIPHER))
    with pytest.raises(SecretsKeyError, match="machine m-2"):
        machine_from_doc({**other, SEALED: doc[SEALED]}, TEST_CIPHER)


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
