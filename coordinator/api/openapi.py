"""The OpenAPI document served at /openapi.json, derived from the route table."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from coordinator.api.routing import Route
from nodeagent.wire import __version__


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": route.summary,
                                 "parameters": [*_parameters(route.path), *_query(route)]}
    if route.auth != "open":
        operation["security"] = [{route.auth: []}]
    if route.body:
        operation["requestBody"] = {"required": not route.body_optional, "content": {
            "application/json": {"schema": _ref(route.body)}}}
    success: dict[str, Any] = {"description": "success"}
    if route.answer:
        success["content"] = {"application/json": {"schema": _ref(route.answer)}}
    responses: dict[str, Any] = {str(route.status): success}
    if route.auth != "open":
        responses["401"] = {"description": "missing, unknown, expired or revoked credential"}
    if route.auth == "machine":
        responses["410"] = {"description": "the machine was deleted: its record and credential "
                                           "are gone (the error says when); register again"}
    if route.auth == "admin" and route.changes:
        responses["403"] = {"description": "a read-only admin token"}
    if route.body:
        responses["422"] = {"description": "invalid body: every problem with its path"}
    operation["responses"] = responses
    return operation


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
            for n in names]


def _query(route: Route) -> list[dict[str, Any]]:
    """The query's parameters, so that a client (and schemathesis) knows to send them."""
    return [{"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in route.query]


@cache
def openapi_document(routes: tuple[Route, ...]) -> dict[str, Any]:
    models = {m for r in routes for m in (r.body, r.answer) if m is not None}
    schemas: dict[str, Any] = {}
    for model in sorted(models, key=lambda m: m.__name__):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
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
