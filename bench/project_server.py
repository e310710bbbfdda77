"""The project's webhook service for the benchmark: every policy on, cluster state from
examples/cluster-state.yaml, served over TLS from the certificates in --cert-dir, with the same
runner settings, the same event-loop lag monitor and the same frozen start-up heap as production.

With `--stats-port`, plain HTTP on that port: `/metrics` (the process's registry: admission
metrics and `gpu_admission_event_loop_lag_seconds`) and `/connections` (the connections the
clients opened, each a TLS handshake, and the reviews by HTTP version), which the pod-create
benchmark reads before and after each timed block. With `--profile FILE`, the process runs under
cProfile and writes its statistics to FILE when terminated (`python -m pstats FILE`). With
`--mark-label KEY`, every pod the pods mutating webhook admits on CREATE also gets the label
`KEY: "true"` in its patch (a form priced by `bench.policy_forms.marked_pods`, not the
service's)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import json
import signal
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from commands.review_inputs import load_cluster_state
from gpu_admission.config.model import load_config
from gpu_admission.process.heap import freeze_long_lived
from gpu_admission.process.http_probes import create_metrics_app
from gpu_admission.process.loop_lag import LoopLag
from gpu_admission.process.metrics import Metrics
from webhooks.dispatch.registry import build_policy_set
from webhooks.service import server as server_module
from webhooks.service.server import create_app, make_runner

ROOT = Path(__file__).resolve().parent.parent
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionCount:
    """The distinct client addresses seen (a connection each: a new one takes a new port) and
    the requests by HTTP version; a set insert per request."""

    def __init__(self) -> None:
        self.peers: set[object] = set()
        self.versions: Counter[str] = Counter()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            self.peers.add(transport.get_extra_info("peername"))
        self.versions[f"HTTP/{request.version.major}.{request.version.minor}"] += 1
        return await handler(request)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"accepted": len(self.peers), "requests": dict(self.versions)})


# A typed key where aiohttp has them (3.12 and later), a string before.
_BODY: Any = web.RequestKey("bench.body", bytes) if hasattr(web, "RequestKey") else "bench.body"


def _keep_bodies() -> None:
    """The service reads each body from the stream itself: keep a copy on the request, for
    `mark_label`'s middleware (the benchmark's own wrapper, not the service's)."""
    read = server_module._read_body

    async def keeping(request: web.Request, limit: int) -> bytes:
        body = await read(request, limit)
        request[_BODY] = body
        return body

    server_module._read_body = keeping


def mark_label(key: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """A middleware adding `key: "true"` to the patch of each pod the pods mutating webhook
    admits on CREATE (`--mark-label`): what a service that marks the pods it handled would
    answer, one operation more."""

    @web.middleware
    async def marking(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        body = request.get(_BODY)
        if request.path != "/mutate/pods" or body is None or not isinstance(response, web.Response):
            return response
        review = json.loads(body)
        if review["request"]["operation"] != "CREATE" or response.body is None:
            return response
        answer = json.loads(bytes(response.body))  # type: ignore[arg-type]
        reply = answer["response"]
        if not reply.get("allowed"):
            return response
        ops = json.loads(base64.b64decode(reply["patch"])) if reply.get("patch") else []
        metadata = review["request"]["object"].get("metadata") or {}
        if "labels" not in metadata:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
        ops.append(
            {"op": "add", "path": f"/metadata/labels/{key.replace('/', '~1')}", "value": "true"}
        )
        reply["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        reply["patchType"] = "JSONPatch"
        return web.json_response(answer)

    return marking


async def serve(
    port: int,
    cert_dir: Path,
    cluster_state: Path,
    stats_port: int | None,
    reuse_port: bool,
    mark: str | None = None,
) -> None:
    config = load_config(environ={})
    state = load_cluster_state(cluster_state, config)
    metrics = Metrics()
    app = create_app(config, build_policy_set(config), state.view, None, lambda: [], metrics)
    count = ConnectionCount()
    if stats_port is not None:
        app.middlewares.append(count.middleware)
    if mark:
        _keep_bodies()
        app.middlewares.append(mark_label(mark))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    runner = make_runner(app, config.server.shutdown_grace_seconds)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=context, reuse_port=reuse_port)
    await site.start()
    if stats_port is not None:
        stats = create_metrics_app(metrics)
        stats.router.add_get("/connections", count.answer)
        stats_runner = web.AppRunner(stats, access_log=None)
        await stats_runner.setup()
        await web.TCPSite(stats_runner, "127.0.0.1", stats_port).start()
    await LoopLag(metrics).start()
    freeze_long_lived("started")  # as `serve` does once started and its caches are full
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()  # until the benchmark terminates the process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", type=Path, required=True)
    parser.add_argument("--cluster-state", type=Path, default=ROOT / "examples/cluster-state.yaml")
    parser.add_argument("--stats-port", type=int, help="plain HTTP: /metrics and /connections")
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop: asyncio's own (as `serve` runs) or uvloop's (as the controller)",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="share --port with other processes started so (SO_REUSEPORT: the kernel spreads new "
        "connections over them, as kube-proxy spreads them over a Service's replicas)",
    )
    parser.add_argument("--profile", type=Path, help="run under cProfile, written here at the end")
    parser.add_argument("--mark-label", help="label each pod the pods mutating webhook admits")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    main_task = serve(
        args.port,
        args.cert_dir,
        args.cluster_state,
        args.stats_port,
        args.reuse_port,
        args.mark_label,
    )
    if args.loop == "uvloop":
        from gpu_admission.process import event_loop

        event_loop.run(main_task)
    else:
        asyncio.run(main_task)
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
