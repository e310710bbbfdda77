"""The benchmark service's `--mark-label`: the pods webhook's answer to a pod's CREATE gains the
label, whatever the pod's labels were, and nothing else changes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench import project_server
from webhooks.service import server as server_module

KEY = "gpu-admission.io/gpu-visibility"


def _review(operation: str, labels: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p"} if labels is None else {"name": "p", "labels": labels}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": operation, "object": {"metadata": metadata}},
    }


async def _answer(request: web.Request) -> web.Response:
    await server_module._read_body(request, 1 << 20)  # as the service reads it
    ops = [{"op": "add", "path": "/spec/containers/0/env", "value": []}]
    response = {"uid": "u", "allowed": True, "patchType": "JSONPatch"}
    response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "response": response})


async def _patched(
    monkeypatch: pytest.MonkeyPatch, review: dict[str, Any], path: str = "/mutate/pods"
) -> list[dict[str, Any]]:
    monkeypatch.setattr(server_module, "_read_body", server_module._read_body)  # restored after
    project_server._keep_bodies()
    app = web.Application(middlewares=[project_server.mark_label(KEY)])
    app.router.add_post(path, _answer)
    async with TestClient(TestServer(app)) as http:
        answer = await (await http.post(path, json=review)).json()
    return json.loads(base64.b64decode(answer["response"]["patch"]))  # type: ignore[no-any-return]


async def test_a_created_pod_without_labels_gets_the_map_then_the_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ops = await _patched(monkeypatch, _review("CREATE", None))
    assert ops[1:] == [
        {"op": "add", "path": "/metadata/labels", "value": {}},
        {"op": "add", "path": "/metadata/labels/gpu-admission.io~1gpu-visibility", "value": "true"},
    ]


async def test_a_pods_own_labels_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = await _patched(monkeypatch, _review("CREATE", {"app": "x"}))
    assert ops[1:] == [
        {"op": "add", "path": "/metadata/labels/gpu-admission.io~1gpu-visibility", "value": "true"}
    ]


async def test_other_operations_and_paths_are_left_as_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(await _patched(monkeypatch, _review("UPDATE", None))) == 1
    assert len(await _patched(monkeypatch, _review("CREATE", None), "/mutate/secrets")) == 1
