import json
from pathlib import Path

from nodeagent.wire.protocol import PrecheckReport, precheck_json_schema

SCHEMA_FILE = Path(__file__).parents[2] / "docs" / "precheck-report.schema.json"


def test_documented_schema_matches_the_wire_type() -> None:
    documented = json.loads(SCHEMA_FILE.read_text())
    assert documented == precheck_json_schema(), (
        "the precheck report changed: update docs/precheck-report.schema.json with "
        "python -c 'import json; from nodeagent.wire.protocol import precheck_json_schema as s; "
        "print(json.dumps(s(), indent=2))' and bump the schema version if it is not additive"
    )


def test_report_round_trips_through_json_with_the_schema_key() -> None:
    report = PrecheckReport.model_validate(
        {
            "schema": "nodeagent.precheck/v1",
            "hostname": "node-1",
            "role": "worker",
            "started_at": 1.0,
            "duration": 0.2,
            "ok": True,
            "summary": {"passed": 1},
            "checks": [
                {"name": "os", "severity": "hard", "status": "pass", "message": "ok",
                 "duration": 0.01}
            ],
        }
    )
    encoded = json.loads(report.to_json())
    assert encoded["schema"] == "nodeagent.precheck/v1"
    assert PrecheckReport.model_validate(encoded) == report
