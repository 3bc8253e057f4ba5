"""A corpus of malformed cluster specs (tests/data/bad-specs), YAML and JSON: each is answered
with a 4xx naming the problem, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import InProcessCoordinator

CORPUS = Path(__file__).resolve().parents[2] / "data" / "bad-specs"
# What the answer must name for each file: the field's path (or what is wrong at the top).
NAMED = {
    "bad-mode.yaml": "machineTypes.worker[0].action.mode",
    "bad-name.yaml": "name",
    "bad-sha.yaml": "machineTypes.worker[0].action.sha256",
    "duplicate-items.yaml": "line 6: machineTypes.worker[1].name: item 'x' appears twice",
    "empty-argv.json": "machineTypes.worker[0].action.argv",
    "empty.yaml": "machineTypes: required",
    "items-not-a-list.json": "machineTypes.worker",
    "malformed-placeholder.yaml": "line 10: machineTypes.worker[0].action.template: malformed "
                                  "placeholder '${machine ip}",
    "missing-name.yaml": "name: required",
    "negative-timeout.yaml": "machineTypes.worker[0].timeout",
    "not-a-mapping.yaml": "expected a mapping",
    "not-yaml.yaml": "not valid YAML",
    "number-release.yaml": "release",
    "relative-file-path.yaml": "machineTypes.worker[0].action.path",
    "shell-string-argv.yaml": "machineTypes.worker[0].action.argv",
    "truncated.json": "line 1",
    "unknown-action.yaml": "teleport",
    "unknown-key.yaml": "settigns: unknown field; did you mean settings?",
    "unknown-phase.yaml": "machineTypes.worker[0].phase",
    "unknown-placeholder.yaml": "line 14: machineTypes.manager[2].action.argv[1]: unknown "
                                "placeholder ${machine.hostnme}; did you mean ${machine.hostname}?",
    "unknown-placeholder-in-env.json": "line 5: machineTypes.worker[0].action.env.CLUSTER: "
                                       "unknown placeholder ${cluster}",
    "version-command-on-deploy.yaml": "machineTypes.manager[0]: versionCommand: only postdeploy",
    "worker-kubeconfig.yaml": "line 7: machineTypes.worker[0].kubeconfigFrom: only manager items",
    "zero-batch.yaml": "settings.workerBatchSize",
}


def test_every_file_in_the_corpus_has_an_expectation() -> None:
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(NAMED)


@pytest.mark.parametrize("name", sorted(NAMED))
async def test_a_malformed_spec_is_refused_naming_the_problem(env: InProcessCoordinator, name: str) -> None:
    before = await env.call("GET", "/v1/clusters", 200)
    history = await env.call("GET", "/v1/events", 200)
    answer = await env.call("PUT", "/v1/clusters", 422, data=(CORPUS / name).read_bytes())
    rendered = answer["error"] + " | " + " | ".join(
        f"line {p['line']}: {p['path']}: {p['message']}" for p in answer.get("problems", []))
    assert NAMED[name] in rendered, rendered
    assert await env.call("GET", "/v1/clusters", 200) == before
    assert await env.call("GET", "/v1/events", 200) == history  # not even an audit line


@pytest.mark.parametrize("name", sorted(n for n in NAMED if "placeholder" in n))
async def test_the_upgrade_dry_run_refuses_a_spec_as_apply_does(env: InProcessCoordinator,
                                                                 name: str) -> None:
    """A spec the dry run passed would fail at apply, or worse, on the nodes."""
    answer = await env.call("POST", "/v1/clusters/lab/upgrade-plan", 422,
                            data=(CORPUS / name).read_bytes())
    assert any(NAMED[name] in f"line {p['line']}: {p['path']}: {p['message']}"
               for p in answer["problems"]), answer
