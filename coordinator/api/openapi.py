"""The OpenAPI document served at /openapi.json; a test checks it lists exactly the real routes."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from coordinator.api.bodies import AdminTokenBody, JoinTokenBody, RoleBody
from coordinator.domain.model import ClusterSpec
from nodeagent import __version__
from nodeagent.protocol import (
    Assignment,
    ItemReport,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
    RotateRequest,
    RotateResponse,
)

MODELS: tuple[type[BaseModel], ...] = (
    AdminTokenBody, Assignment, ClusterSpec, ItemReport, JoinTokenBody, PrecheckReport,
    RegisterRequest, RegisterResponse, RoleBody, RotateRequest, RotateResponse,
)
# Bodies that may be left out: every field then takes its default.
OPTIONAL_BODIES = frozenset({("post", "/v1/machines/{ref}/approve"),
                             ("post", "/v1/clusters/{name}/join-tokens"),
                             ("post", "/v1/clusters/{name}/upgrade-plan")})

# POSTs that change nothing (their body is a what-if): read-only tokens may send them, and
# they are not audited.
DRY_RUNS = frozenset({("post", "/v1/clusters/{name}/upgrade-plan")})

# (method, path, summary, security, request schema, success status, response schema)
OPERATIONS: tuple[tuple[str, str, str, str | None, str | None, int, str | None], ...] = (
    ("get", "/healthz", "Liveness", None, None, 200, None),
    ("get", "/readyz", "Readiness: the store answers", None, None, 200, None),
    ("get", "/openapi.json", "This document", None, None, 200, None),
    ("get", "/v1/ca.crt", "The CA certificate (PEM) agents check against their join string's "
     "hash", None, None, 200, None),
    ("post", "/v1/agent/register", "Register a machine with a join token", None,
     "RegisterRequest", 201, "RegisterResponse"),
    ("get", "/v1/agent/machines/{machine_id}/assignment",
     "Long-poll the machine's assignment (query: after=generation, wait=seconds; 304 when "
     "If-None-Match names the generation and the wait ran out with nothing new)", "machine",
     None, 200, "Assignment"),
    ("post", "/v1/agent/machines/{machine_id}/reports", "Report an item's progress", "machine",
     "ItemReport", 200, None),
    ("post", "/v1/agent/machines/{machine_id}/heartbeat", "Heartbeat", "machine", None, 200, None),
    ("post", "/v1/agent/machines/{machine_id}/precheck",
     "Replace a Pending machine's precheck report (the agent re-ran its prechecks)", "machine",
     "PrecheckReport", 200, None),
    ("post", "/v1/agent/machines/{machine_id}/credential",
     "Rotate the machine's credential to one the agent chose", "machine", "RotateRequest", 200,
     "RotateResponse"),
    ("get", "/v1/artifacts/{name}", "Download an artifact", "machine", None, 200, None),
    ("get", "/v1/clusters", "List clusters", "admin", None, 200, None),
    ("put", "/v1/clusters", "Apply a cluster spec (YAML or JSON body)", "admin", "ClusterSpec",
     200, None),
    ("get", "/v1/clusters/{name}", "Get a cluster", "admin", None, 200, None),
    ("delete", "/v1/clusters/{name}", "Delete a cluster: every machine resets first", "admin",
     None, 202, None),
    ("get", "/v1/clusters/{name}/status", "Machine states and item progress", "admin", None,
     200, None),
    ("post", "/v1/clusters/{name}/join-tokens",
     "Create a join token and its join string (shown once)", "admin", "JoinTokenBody", 201, None),
    ("get", "/v1/clusters/{name}/join-tokens", "List a cluster's join tokens", "admin", None,
     200, None),
    ("get", "/v1/join-tokens", "List every join token", "admin", None, 200, None),
    ("delete", "/v1/join-tokens/{id}", "Revoke a join token", "admin", None, 200, None),
    ("get", "/v1/admin-tokens", "List admin API tokens", "admin", None, 200, None),
    ("post", "/v1/admin-tokens", "Create an admin API token (admin or read-only; shown once)",
     "admin", "AdminTokenBody", 201, None),
    ("delete", "/v1/admin-tokens/{id}", "Revoke an admin API token", "admin", None, 200, None),
    ("get", "/v1/machines", "List machines (query: cluster)", "admin", None, 200, None),
    ("get", "/v1/machines/{ref}", "Get a machine by id or hostname", "admin", None, 200, None),
    ("delete", "/v1/machines/{ref}", "Delete a machine (reset items first unless force=true)",
     "admin", None, 202, None),
    ("post", "/v1/machines/{ref}/approve", "Approve a Pending machine, optionally with a role",
     "admin", "RoleBody", 200, None),
    ("put", "/v1/machines/{ref}/role", "Set a Pending machine's role", "admin", "RoleBody",
     200, None),
    ("get", "/v1/clusters/{name}/upgrade-plan",
     "Dry run: the order and batches of the upgrade the stored spec would take", "admin", None,
     200, None),
    ("post", "/v1/clusters/{name}/upgrade-plan",
     "Dry run of a new spec (the body, YAML or JSON; none: the stored spec): the order and "
     "batches of the upgrade its apply would start; changes nothing, so read-only tokens may "
     "send it", "admin",
     "ClusterSpec", 200, None),
    ("post", "/v1/clusters/{name}/upgrade/{verb}",
     "verb pause: no machine starts upgrading (running ones finish); verb resume", "admin", None,
     200, None),
    ("post", "/v1/machines/{ref}/drain/{action}",
     "A machine's drain: action retry (new attempt and timeout), skip (upgrade with the pods "
     "left) or force (delete pods their budgets protect)", "admin", None, 200, None),
    ("post", "/v1/machines/{ref}/revoke", "Revoke a machine's credential", "admin", None, 200,
     None),
    ("get", "/v1/events", "Event history (query: cluster, machine (id or hostname), kind "
     "(comma-separated), since (unix time), after_id, limit, order=asc|desc)",
     "admin", None, 200, None),
    ("get", "/v1/events/stream", "Server-sent events: new events as they are recorded (the "
     "filters of /v1/events; resumes after Last-Event-ID)", "admin", None, 200, None),
    ("get", "/metrics", "Prometheus metrics (text format)", None, None, 200, None),
    ("get", "/", "Redirects to the dashboard", None, None, 302, None),
    ("get", "/ui/", "Redirects to the dashboard", None, None, 302, None),
    ("get", "/ui/{name}", "The web dashboard's files (the page asks for the admin token)", None,
     None, 200, None),
)

def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
            for n in names]


@cache
def openapi_document() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
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
            operation["requestBody"] = {"required": (method, path) not in OPTIONAL_BODIES, "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}}}
        success: dict[str, Any] = {"description": "success"}
        if response:
            success["content"] = {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{response}"}}}
        responses: dict[str, Any] = {str(status): success}
        if security:
            responses["401"] = {"description": "missing, unknown, expired or revoked credential"}
        if security == "admin" and method != "get" and (method, path) not in DRY_RUNS:
            responses["403"] = {"description": "a read-only admin token"}
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
