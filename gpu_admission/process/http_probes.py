"""The small HTTP answers every gpu-admission process gives: JSON errors, liveness, readiness and
the Prometheus exposition. The webhook service serves the probes on its HTTPS port; the controller
serves them, with /metrics, on its plain-HTTP metrics port."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gpu_admission.process.metrics import EXPOSITION_CONTENT_TYPE, Metrics

JSON_CONTENT_TYPE = "application/json"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"

Readiness = Callable[[], list[str]]
"""Names of what is not ready yet (certificates, caches, shutdown); empty when ready."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(status: int, payload: dict[str, Any], **headers: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload).encode(),
        headers={"Content-Type": JSON_CONTENT_TYPE, **headers},
    )


def error_response(status: int, message: str, **headers: str) -> web.Response:
    return json_response(status, {"error": message}, **headers)


def get_only(handler: Handler) -> Handler:
    async def guarded(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return error_response(405, f"{request.path} accepts GET only", Allow="GET, HEAD")
        return await handler(request)

    return guarded


def health_handlers(
    readiness: Readiness, liveness: Readiness | None = None
) -> tuple[Handler, Handler]:
    """`liveness`: what only a restart mends (a hung call no timeout can undo); answering at
    all proves the event loop runs, which is all liveness asks without it."""

    async def healthz(request: web.Request) -> web.StreamResponse:
        failing = liveness() if liveness is not None else []
        if failing:
            return json_response(503, {"status": "failing", "failing": failing})
        return json_response(200, {"status": "ok"})

    async def readyz(request: web.Request) -> web.StreamResponse:
        waiting = readiness()
        if waiting:
            return json_response(503, {"status": "not ready", "waiting_for": waiting})
        return json_response(200, {"status": "ready"})

    return get_only(healthz), get_only(readyz)


def create_metrics_app(
    metrics: Metrics, readiness: Readiness | None = None, liveness: Readiness | None = None
) -> web.Application:
    """Plain HTTP: GET /metrics in the Prometheus text format; with `readiness`, /healthz and
    /readyz as well (the controller's and the node agent's probes)."""

    async def exposition(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=metrics.exposition(),
            headers={"Content-Type": EXPOSITION_CONTENT_TYPE},
        )

    paths = [METRICS_PATH]
    app = web.Application()
    app.router.add_route("*", METRICS_PATH, get_only(exposition))
    if readiness is not None:
        healthz, readyz = health_handlers(readiness, liveness)
        app.router.add_route("*", HEALTH_PATH, healthz)
        app.router.add_route("*", READY_PATH, readyz)
        paths += [HEALTH_PATH, READY_PATH]

    async def not_found(request: web.Request) -> web.StreamResponse:
        return error_response(
            404, f"nothing is served at {request.path}; this port serves {', '.join(paths)}"
        )

    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
