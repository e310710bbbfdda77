"""A played mutating webhook for pods, as another project serves one: `mutate` makes the pod it
would admit (or says why it refuses), and the answer is a JSON Patch from the pod it got to that
pod, echoed in the review's own apiVersion (v1 or v1beta1)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
from aiohttp import web

# The pod it was sent -> the pod it makes, and the refusal's message (None: admitted).
Mutate = Callable[[dict[str, Any]], tuple[dict[str, Any], str | None]]


def answer(review: dict[str, Any], mutate: Mutate) -> dict[str, Any]:
    pod = review["request"]["object"]
    made, refusal = mutate(pod)
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": refusal is None}
    if refusal is not None:
        response["status"] = {"code": 403, "message": refusal}
    elif ops := jsonpatch.make_patch(pod, made).patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {**review, "response": response}


def app(path: str, mutate: Mutate) -> web.Application:
    async def review(request: web.Request) -> web.Response:
        return web.json_response(answer(await request.json(), mutate))

    application = web.Application()
    application.router.add_post(path, review)
    return application
