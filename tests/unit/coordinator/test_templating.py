"""A spec's placeholders checked against the values an assignment fills in, without a store:
every text the agent substitutes in, each problem where the operator wrote it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.model import ClusterSpec
from coordinator.domain.specs.specs import load_spec
from coordinator.domain.specs.templating import template_problems, template_values
from nodeagent.wire.templates import render
from nodeagent.wire.validation import InvalidDocument
from tests.support.builders import cluster, machine, node_facts


def spec_with(action: dict[str, Any], **fields: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({"name": "edge", "release": "1", "machineTypes": {
        "manager": [{"name": "x", "phase": "postdeploy", "action": action, **fields}]}})


def test_every_value_an_assignment_fills_in_may_be_named_and_nothing_else() -> None:
    names = template_values(cluster(), machine("w1"), [])
    every = " ".join(f"${{{name}}}" for name in names)
    assert template_problems(spec_with({"type": "exec", "argv": ["echo", every]})) == []
    assert template_problems(spec_with({"type": "exec", "argv": ["${machine.hostnme}"]})) != []


@pytest.mark.parametrize(("action", "fields", "where"), [
    ({"type": "exec", "argv": ["echo", "${nope}"]}, {}, ("action", "argv", 1)),
    ({"type": "exec", "argv": ["env"], "env": {"NODE": "${nope}"}}, {}, ("action", "env", "NODE")),
    ({"type": "exec", "argv": ["ls"], "cwd": "/srv/${nope}"}, {}, ("action", "cwd")),
    ({"type": "file", "path": "/etc/a", "template": "a\n${nope}\n"}, {}, ("action", "template")),
    ({"type": "version", "argv": ["${nope}"], "expect": "1"}, {}, ("action", "argv", 0)),
    ({"type": "exec", "argv": ["true"]}, {"versionCommand": ["v", "${nope}"]}, ("versionCommand", 1)),
])
def test_each_text_the_agent_substitutes_in_is_checked_where_it_is(
        action: dict[str, Any], fields: dict[str, Any], where: tuple[Any, ...]) -> None:
    ((location, message),) = template_problems(spec_with(action, **fields))
    assert location == ("machineTypes", "manager", 0, *where)
    assert message.startswith("unknown placeholder ${nope}; if it is the shell's, write "
                              "$${nope} (known: ${cluster.name}, ")


def test_texts_the_agent_writes_as_they_are_are_not_checked() -> None:
    assert template_problems(spec_with({"type": "file", "path": "/etc/${a}", "content": "${b}"})) == []
    assert template_problems(spec_with({"type": "download", "url": "https://x/${a}", "path": "/a",
                                        "sha256": "0" * 64})) == []


def test_escapes_and_the_shells_own_dollars_are_not_placeholders() -> None:
    argv = ["sh", "-c", 'echo $$ $${HOME} $HOME $1 "$@" $!']
    assert template_problems(spec_with({"type": "exec", "argv": argv})) == []


def test_a_malformed_placeholder_is_refused_quoting_it() -> None:
    ((_, message),) = template_problems(spec_with({"type": "exec", "argv": ["${machine ip}"]}))
    assert message == ("malformed placeholder '${machine ip}': use ${dotted.name}, or $${...} "
                       "for a literal")


@pytest.mark.parametrize("name", ["HOME", "node_ip"])
def test_a_shell_variable_is_told_the_escape_that_passes_it_to_the_shell(name: str) -> None:
    """`${HOME}` in an exec argument is the shell's: the refusal says to write `$${HOME}`,
    which the agent hands the shell as `${HOME}`."""
    ((_, message),) = template_problems(spec_with({"type": "exec",
                                                   "argv": ["sh", "-c", f"ls ${{{name}}}"]}))
    assert message.startswith(f"unknown placeholder ${{{name}}}; if it is the shell's, write "
                              f"$${{{name}}} (known: "), message
    escaped = {"type": "exec", "argv": ["sh", "-c", f"ls $${{{name}}}"]}
    assert template_problems(spec_with(escaped)) == []
    assert render(escaped["argv"][2], {}) == f"ls ${{{name}}}"


def test_a_near_miss_is_named_with_the_name_meant() -> None:
    ((_, message),) = template_problems(spec_with({"type": "exec",
                                                   "argv": ["x", "${machine.hostnme}"]}))
    assert message.startswith("unknown placeholder ${machine.hostnme}; did you mean "
                              "${machine.hostname}? (known: ")


SPEC = """\
name: lab
release: "1.0"
machineTypes:
  worker:
    - name: hostname
      phase: prepare
      action:
        type: exec
        argv:
          - hostnamectl
          - ${machine.hostnme}
        env: {CLUSTER: "${cluster.name}", PROXY: "${proxy.https}", BAD: "${ntp.server}"}
"""


def test_a_spec_from_the_operator_is_refused_naming_each_line_path_and_name() -> None:
    with pytest.raises(InvalidDocument) as refused:
        load_spec(SPEC)
    first, second = (problem.text() for problem in refused.value.problems)
    assert first.startswith("line 11: machineTypes.worker[0].action.argv[1]: unknown "
                            "placeholder ${machine.hostnme}; did you mean ${machine.hostname}? "
                            "(known: ${cluster.name}, ${cluster.release}, "), first
    # the 29 known names once per answer, not again on every line
    assert second == ("line 12: machineTypes.worker[0].action.env.BAD: unknown placeholder "
                      "${ntp.server}; did you mean ${ntp.servers}?")
    fixed = SPEC.replace("hostnme", "hostname").replace("ntp.server}", "ntp.servers}")
    assert load_spec(fixed).name == "lab"


def labelled_spec(*argv: str) -> ClusterSpec:
    return load_spec(f"""\
name: lab
release: "1.0"
settings:
  kubernetes: {{labels: {{env: prod, tier: gold}}}}
machineTypes:
  worker:
    - {{name: kubelet, phase: deploy, action: {{type: exec, argv: {list(argv)}}}}}
""")


def test_a_cluster_label_is_a_value_of_its_own_and_only_the_specs_labels_are() -> None:
    spec = labelled_spec("echo", "${cluster.labels.env}", "${cluster.labels}")
    values = template_values(spec, machine("w1"), [])
    assert (values["cluster.labels.env"], values["cluster.labels"]) == ("prod",
                                                                        "env=prod,tier=gold")
    with pytest.raises(InvalidDocument) as refused:
        labelled_spec("echo", "${cluster.labels.tir}")
    assert str(refused.value).startswith(
        "line 7: machineTypes.worker[0].action.argv[1]: unknown placeholder "
        "${cluster.labels.tir}; did you mean ${cluster.labels.tier}? (known: ${cluster.name}, ")
    assert "${cluster.labels.env}, ${cluster.labels.tier}, ${machine.labels.KEY})" \
        in str(refused.value)


def test_any_machine_label_may_be_named_and_one_the_machine_lacks_renders_empty() -> None:
    spec = labelled_spec("kubelet", "--node-labels=${machine.labels}",
                         "--zone=${machine.labels.zone}", "--rack=${machine.labels.rack}")
    w1 = replace(machine("w1"), labels={"zone": "eu-1a", "example.com/gpu": "a100"})
    values = template_values(spec, w1, [])
    assert (values["machine.labels"], values["machine.labels.zone"],
            values["machine.labels.rack"]) == ("example.com/gpu=a100,zone=eu-1a", "eu-1a", "")
    assert render(" ".join(spec.machine_types.worker[0].action.argv), values) == (  # type: ignore[union-attr]
        "kubelet --node-labels=example.com/gpu=a100,zone=eu-1a --zone=eu-1a --rack=")
    with pytest.raises(InvalidDocument, match=r"unknown placeholder \$\{machine\.labels\.-x\}"):
        labelled_spec("echo", "${machine.labels.-x}")


def test_the_machines_interface_and_unused_disks_come_from_its_facts() -> None:
    w1 = replace(machine("w1"), facts=node_facts(), ip="10.10.0.5")
    values = template_values(cluster(), w1, [])
    assert (values["machine.ip"], values["machine.interface"]) == ("10.10.0.5", "eth1")
    assert values["machine.devices"] == "/dev/sdb"  # sda mounted, sdc LVM's, sr0 removable, sdd ro
    assert (template_values(cluster(), machine("w1"), [])["machine.devices"],
            template_values(cluster(), machine("w1"), [])["machine.interface"]) == ("", "")
