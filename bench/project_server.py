"""The project's webhook service for the benchmark: every policy on, cluster state from
examples/cluster-state.yaml, served over TLS from the certificates in --cert-dir, with the same
runner settings and the same frozen start-up heap as production."""

from __future__ import annotations

import argparse
import asyncio
import ssl
from pathlib import Path

from aiohttp import web

from commands.review_inputs import load_cluster_state
from gpu_admission.config import load_config
from gpu_admission.heap import freeze_long_lived
from webhooks.registry import build_policy_set
from webhooks.server import create_app, make_runner

ROOT = Path(__file__).resolve().parent.parent


async def serve(port: int, cert_dir: Path, cluster_state: Path) -> None:
    config = load_config(environ={})
    state = load_cluster_state(cluster_state, config)
    app = create_app(config, build_policy_set(config), state.view, None, lambda: [])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    runner = make_runner(app, config.server.shutdown_grace_seconds)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    freeze_long_lived("started")  # as `serve` does once started and its caches are full
    await asyncio.Event().wait()  # until the benchmark terminates the process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", type=Path, required=True)
    parser.add_argument("--cluster-state", type=Path, default=ROOT / "examples/cluster-state.yaml")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.cert_dir, args.cluster_state))


if __name__ == "__main__":
    main()
