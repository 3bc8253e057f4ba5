"""Wire types shared by the agent and the coordinator: one definition, validated on both ends.

The precheck report printed by `nodeagent precheck --output json` is the same document
the agent sends at registration; its JSON Schema is kept in docs/precheck-report.schema.json.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PRECHECK_SCHEMA = "nodeagent.precheck/v1"


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Severity(StrEnum):
    HARD = "hard"  # a failure stops the node from joining
    SOFT = "soft"  # reported as a warning, as kubeadm warns


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Wire):
    name: str
    severity: Severity
    status: Status
    message: str
    remedy: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    duration: float = Field(description="seconds the check took")
    ignored: bool = Field(
        default=False, description="a failure turned into a warning by --ignore"
    )


class Summary(_Wire):
    passed: int = 0
    warned: int = 0
    failed: int = 0
    skipped: int = 0


class PrecheckReport(_Wire):
    schema_: Literal["nodeagent.precheck/v1"] = Field(default=PRECHECK_SCHEMA, alias="schema")
    hostname: str
    role: Literal["manager", "worker"]
    started_at: float = Field(description="unix time the run started")
    duration: float = Field(description="wall-clock seconds of the whole run")
    ok: bool = Field(description="true when no hard check failed")
    summary: Summary
    checks: list[CheckResult]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


def precheck_json_schema() -> dict[str, Any]:
    """The documented schema of the precheck report (docs/precheck-report.schema.json)."""
    schema = PrecheckReport.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = PRECHECK_SCHEMA
    return schema
