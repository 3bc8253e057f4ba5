"""The OpenAPI document served at /openapi.json; a test checks it lists exactly the real routes."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from coordinator.model import ClusterSpec
from nodeagent import __version__
from nodeagent.protocol import (
    Assignment,
    ItemReport,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
)

MODELS: tuple[type[BaseModel], ...] = (
    Assignment, ClusterSpec, ItemReport, PrecheckReport, RegisterRequest, RegisterResponse,
)

# (method, path, summary, security, request schema, success status, response schema)
OPERATIONS: tuple[tuple[str, str, str, str | None, str | None, int, str | None], ...] = (
    ("get", "/healthz", "Liveness", None, None, 200, None),
    ("get", "/readyz", "Readiness: the store answers", None, None, 200, None),
    ("get", "/openapi.json", "This document", None, None, 200, None),
    ("post", "/v1/agent/register", "Register a machine with a join token", None,
     "RegisterRequest", 201, "RegisterResponse"),
    ("get", "/v1/agent/machines/{machine_id}/assignment",
     "Long-poll the machine's assignment (query: after=generation, wait=seconds)", "machine",
     None, 200, "Assignment"),
    ("post", "/v1/agent/machines/{machine_id}/reports", "Report an item's progress", "machine",
     "ItemReport", 200, None),
    ("post", "/v1/agent/machines/{machine_id}/heartbeat", "Heartbeat", "machine", None, 200, None),
    ("post", "/v1/agent/machines/{machine_id}/precheck",
     "Replace a Pending machine's precheck report (the agent re-ran its prechecks)", "machine",
     "PrecheckReport", 200, None),
    ("get", "/v1/artifacts/{name}", "Download an artifact", "machine", None, 200, None),
    ("get", "/v1/clusters", "List clusters", "admin", None, 200, None),
    ("put", "/v1/clusters", "Apply a cluster spec (YAML or JSON body)", "admin", "ClusterSpec",
     200, None),
    ("get", "/v1/clusters/{name}", "Get a cluster", "admin", None, 200, None),
    ("delete", "/v1/clusters/{name}", "Delete a cluster: every machine resets first", "admin",
     None, 202, None),
    ("get", "/v1/clusters/{name}/status", "Machine states and item progress", "admin", None,
     200, None),
    ("post", "/v1/clusters/{name}/join-tokens", "Create a join token", "admin", None, 201, None),
    ("get", "/v1/machines", "List machines (query: cluster)", "admin", None, 200, None),
    ("get", "/v1/machines/{ref}", "Get a machine by id or hostname", "admin", None, 200, None),
    ("delete", "/v1/machines/{ref}", "Delete a machine (reset items first unless force=true)",
     "admin", None, 202, None),
    ("post", "/v1/machines/{ref}/approve", "Approve a Pending machine, optionally with a role",
     "admin", "RoleBody", 200, None),
    ("put", "/v1/machines/{ref}/role", "Set a Pending machine's role", "admin", "RoleBody",
     200, None),
    ("post", "/v1/clusters/{name}/upgrade-plan",
     "Dry run: the order and batches of the upgrade the stored spec (or the spec in the body, "
     "YAML or JSON) would take; changes nothing", "admin", None, 200, None),
    ("post", "/v1/clusters/{name}/upgrade/{verb}",
     "verb pause: no machine starts upgrading (running ones finish); verb resume", "admin", None,
     200, None),
    ("post", "/v1/machines/{ref}/drain/{action}",
     "A machine's drain: action retry (new attempt and timeout), skip (upgrade with the pods "
     "left) or force (delete pods their budgets protect)", "admin", None, 200, None),
    ("get", "/v1/events", "Event history (query: cluster, machine, after_id, since, limit)",
     "admin", None, 200, None),
)

ROLE_BODY = {"type": "object", "properties": {"role": {"enum": ["manager", "worker"]}},
             "additionalProperties": False}


def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
            for n in names]


@cache
def openapi_document() -> dict[str, Any]:
    schemas: dict[str, Any] = {"RoleBody": ROLE_BODY}
    for model in MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, security, request, status, response in OPERATIONS:
        operation: dict[str, Any] = {"summary": summary, "parameters": _parameters(path)}
        if security:
            operation["security"] = [{security: []}]
        if request:
            operation["requestBody"] = {"required": request != "RoleBody", "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}}}
        success: dict[str, Any] = {"description": "success"}
        if response:
            success["content"] = {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{response}"}}}
        responses: dict[str, Any] = {str(status): success}
        if security:
            responses["401"] = {"description": "missing or wrong credential"}
        if request:
            responses["422"] = {"description": "invalid body: every problem with its path"}
        operation["responses"] = responses
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "nodeagent coordinator", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "admin": {"type": "http", "scheme": "bearer", "description": "admin token"},
                "machine": {"type": "http", "scheme": "bearer",
                            "description": "the machine's own credential from registration"},
            },
        },
    }
