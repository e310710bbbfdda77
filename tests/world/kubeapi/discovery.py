"""Discovery documents, a minimal OpenAPI v3 index and Table rendering, as kubectl consumes them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .resources import ALL_VERBS, RESOURCES, Resource, group_versions

SERVER_VERSION = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.25.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list() -> dict[str, Any]:
    groups = [_group(g, v) for g, v in group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict[str, Any] | None:
    versions = group_versions().get(name)
    if not name or versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _resource_entry(r: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(ALL_VERBS),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    return entry


def _subresource_entry(r: Resource, sub: str) -> dict[str, Any]:
    kinds = {"binding": "Binding", "token": "TokenRequest"}
    verbs = {
        "binding": ["create"],
        "ephemeralcontainers": ["get", "patch", "update"],
        "log": ["get"],
        "token": ["create"],
    }
    return {
        "name": f"{r.plural}/{sub}",
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": kinds.get(sub, r.kind),
        "verbs": verbs.get(sub, ["get", "patch", "update"]),
    }


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    members = [r for r in RESOURCES if r.group == group and r.version == version]
    if not members:
        return None
    resources: list[dict[str, Any]] = []
    for r in members:
        resources.append(_resource_entry(r))
        resources.extend(_subresource_entry(r, sub) for sub in r.subresources)
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }


def openapi_v3_index() -> dict[str, Any]:
    """Lists the group versions; their documents are minimal (kubectl falls back gracefully)."""
    paths = {}
    for group, versions in group_versions().items():
        for version in versions:
            path = f"api/{version}" if not group else f"apis/{group}/{version}"
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash=0"}
    return {"paths": paths}


def openapi_v3_group_version(group: str, version: str) -> dict[str, Any] | None:
    """Just enough for kubectl: PATCH operations that declare the fieldValidation parameter, which
    is how kubectl decides to leave validation to the server (no schemas are served)."""
    members = [r for r in RESOURCES if r.group == group and r.version == version]
    if not members:
        return None
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths: dict[str, Any] = {}
    for r in members:
        scope = "/namespaces/{namespace}" if r.namespaced else ""
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[f"{prefix}{scope}/{r.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.2"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def _age(created: str | None, now: dt.datetime) -> str:
    if not created:
        return "<unknown>"
    then = dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(items: list[dict[str, Any]], list_meta: dict[str, Any]) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table with NAME and AGE columns (objects included as metadata only)."""
    now = dt.datetime.now(dt.UTC)
    rows = []
    for item in items:
        meta = item.get("metadata", {})
        rows.append(
            {
                "cells": [meta.get("name", ""), _age(meta.get("creationTimestamp"), now)],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": [
            {
                "name": "Name",
                "type": "string",
                "format": "name",
                "priority": 0,
                "description": "Name must be unique within a namespace.",
            },
            {
                "name": "Age",
                "type": "string",
                "format": "",
                "priority": 0,
                "description": "CreationTimestamp is when the object was created.",
            },
        ],
        "rows": rows,
    }
