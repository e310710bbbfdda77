"""Waiting for applied CRDs to be served, as `kubectl wait --for condition=established` means
to: `kubectl wait` fails at once, instead of waiting, on a CRD the API server has not yet given
any condition (`.status.conditions accessor error: <nil> is of the type <nil>`), as a CRD
applied a moment before may be."""

from __future__ import annotations

import json
import time

from kubernetes import client

ESTABLISHED_SECONDS = 60.0


def not_established(api: client.ApiClient) -> list[str]:
    """The CRDs whose Established condition is not (yet) True."""
    listed = client.ApiextensionsV1Api(api).list_custom_resource_definition(_preload_content=False)
    pending = []
    for crd in json.loads(listed.data)["items"]:
        conditions = (crd.get("status") or {}).get("conditions") or []
        if {"type": "Established", "status": "True"} not in [
            {"type": c.get("type"), "status": c.get("status")} for c in conditions
        ]:
            pending.append(crd["metadata"]["name"])
    return pending


def wait_established(api: client.ApiClient, timeout: float = ESTABLISHED_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while pending := not_established(api):
        assert time.monotonic() < deadline, f"CRDs not established in {timeout:g} s: {pending}"
        time.sleep(0.1)  # polling the condition, bounded by the deadline
