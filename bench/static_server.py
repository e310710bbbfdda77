"""The baseline: an aiohttp HTTPS server that answers every POST with one fixed AdmissionReview
response. Whatever the project's server costs beyond this is the cost of admission itself."""

from __future__ import annotations

import argparse
import json
import ssl

from aiohttp import web

RESPONSE = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "static", "allowed": True},
    }
).encode()


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=RESPONSE, content_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app.router.add_post("/{path:.*}", answer)
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=context, print=None)


if __name__ == "__main__":
    main()
