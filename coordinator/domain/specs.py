"""A cluster spec as an operator sends it (`cluster apply`, the upgrade dry run, `init
--cluster`): the model's validation, then the rules that need the whole spec, every problem
with its line. Specs already stored are not checked again: one stored before a rule existed
must still load."""

from __future__ import annotations

from coordinator.domain import outputs
from coordinator.domain.model import ClusterSpec
from coordinator.domain.templating import template_problems
from nodeagent.protocol import Location
from nodeagent.validation import load_model


def load_spec(text: str, source: str | None = None) -> ClusterSpec:
    """text as a spec, or InvalidDocument naming each problem, e.g. `line 14:
    machineTypes.manager[2].action.argv[1]: unknown placeholder ${machine.hostnme} ...`."""
    return load_model(ClusterSpec, text, source, rules=spec_problems)


def spec_problems(spec: ClusterSpec) -> list[tuple[Location, str]]:
    """The rules that need the whole spec: placeholders, then outputs and conditions."""
    return [*template_problems(spec), *outputs.problems(spec)]
