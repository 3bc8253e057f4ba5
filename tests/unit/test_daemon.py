"""What makes the daemon stop a running phase: it reads the assignment as raw JSON (it holds
no pydantic), so this checks it against the wire types' own idea of an item's identity. And
what it tells the operator when the coordinator refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeagent.client import Rejected
from nodeagent.daemon import _work_key, unauthorized
from nodeagent.wire.protocol import Assignment, StateItem

ITEM: dict[str, Any] = {"name": "join", "phase": "deploy",
                        "action": {"type": "exec", "argv": ["kubeadm", "join"]}}


def sent(*items: dict[str, Any], phase: str = "deploy", generation: int = 1,
         **fields: Any) -> dict[str, Any]:
    """The assignment as the coordinator puts it on the wire."""
    return Assignment(machine_id="m1", generation=generation, state="Deploy", phase=phase,
                      items=[StateItem.model_validate(i) for i in items],
                      **fields).model_dump(mode="json", by_alias=True)


def test_an_item_the_fingerprint_tells_apart_is_other_work() -> None:
    for changed in ({"version": "2"}, {"kubeconfigFrom": "/etc/kubernetes/admin.conf"},
                    {"action": {"type": "exec", "argv": ["kubeadm", "join", "--v=5"]}},
                    {"name": "join2"}):
        other = {**ITEM, **changed}
        assert StateItem.model_validate(other).fingerprint() != \
            StateItem.model_validate(ITEM).fingerprint()
        assert _work_key(sent(other)) != _work_key(sent(ITEM)), changed


def test_the_same_items_are_the_same_work() -> None:
    """Another timeout, other template values or another generation leave a running phase
    alone; another phase does not."""
    assert _work_key(sent({**ITEM, "timeout": 30})) == _work_key(sent(ITEM))
    assert _work_key(sent(ITEM, values={"cluster.name": "b"}, generation=7)) == \
        _work_key(sent(ITEM))
    assert _work_key(sent(ITEM, phase="upgrade")) != _work_key(sent(ITEM))
    assert _work_key(sent(ITEM, ITEM | {"name": "other"})) != _work_key(sent(ITEM))


def test_a_new_value_of_a_secret_the_items_use_is_other_work() -> None:
    """A token minted again: the phase restarts with it (the one it runs with may be expired
    or revoked). A secret no item uses, or another plain value, leaves it running."""
    joining = {**ITEM, "action": {"type": "exec",
                                  "argv": ["kubeadm", "join", "--token", "${material.token}"]}}

    def key(token: str, managers: str = "10.0.0.1", other: str = "a1b2c3") -> tuple[object, ...]:
        return _work_key(sent(joining, values={"material.token": token, "managers.ips": managers,
                                               "outputs.init.key": other},
                              secrets=["material.token", "outputs.init.key"]))

    assert key("abcdef.0123456789abcdef") != key("ghijkl.0123456789abcdef")
    assert key("abcdef.0123456789abcdef") == key("abcdef.0123456789abcdef", "10.0.0.1,10.0.0.2")
    assert key("abcdef.0123456789abcdef") == key("abcdef.0123456789abcdef", other="d4e5f6")


def test_a_retry_the_operator_ordered_is_other_work() -> None:
    """The agent gave up on an item: only a new retry count (or other items) starts it again,
    not any new generation."""
    assert _work_key(sent(ITEM, retries=1)) != _work_key(sent(ITEM))
    assert _work_key(sent(ITEM, retries=1, generation=9)) == _work_key(sent(ITEM, retries=1))


def test_a_refused_registration_names_the_string_refused_and_its_remedy() -> None:
    """Registering there is no machine yet: a refused join token is replaced by a new one (not
    reissued, nor is identity.json removed), a refused reissue string by a reissue of the
    machine it names; a refused credential keeps the machine's record by a reissue."""
    identity = Path("/var/lib/nodeagent/identity.json")
    revoked = Rejected(401, "join token 34da2bde388b revoked")
    joining = unauthorized("register", revoked, "join_abc", None, "/etc/nodeagent/config.yaml",
                           identity)
    assert "`coordinator join-token create CLUSTER`" in joining
    assert "join token 34da2bde388b revoked" in joining
    assert "machines reissue" not in joining and str(identity) not in joining
    assert "machine's credential" not in joining

    used = Rejected(401, "this reissue string was used at 2026-11-28T17:00:00Z")
    rejoining = unauthorized("register", used, "rejoin_3f2a-11_00ff", None, "agent.yaml",
                             identity)
    assert "`coordinator machines reissue 3f2a-11`" in rejoining and "was used at" in rejoining
    assert "join-token create" not in rejoining

    credential = unauthorized("fetch assignment", Rejected(401, "unknown or revoked machine "
                              "credential"), None, "3f2a-11", "agent.yaml", identity)
    assert "`coordinator machines reissue 3f2a-11`" in credential and str(identity) in credential
