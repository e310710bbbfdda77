"""Modes over real HTTPS: the answer carries auditAnnotations (the API server writes them into its
audit event), remembered answers too, and the decisions metric counts each one."""

from __future__ import annotations

import copy
import json

import aiohttp

from certs.issue import CertBundle
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.webhooks.server_helpers import (
    fixture_bytes,
    post_review,
    server_context,
    serving,
)
from webhooks.dispatch.registry import build_policy_set
from webhooks.service.server import create_app

CPU_POD = fixture_bytes("pod-cpu-cuda-image.mutating.json")


def _with_uid(body: bytes, uid: str) -> bytes:
    review = json.loads(body)
    review["request"]["uid"] = uid
    return json.dumps(review).encode()


def _counted(metrics: Metrics, policy: str, mode: str, decision: str) -> float:
    line = (
        f'gpu_admission_admission_policy_decisions_total{{decision="{decision}",'
        f'mode="{mode}",policy="{policy}"}}'
    )
    for text in metrics.exposition().decode().splitlines():
        if text.startswith(line):
            return float(text.split()[-1])
    return 0.0


async def _serve_and_post(
    bundle: CertBundle, session: aiohttp.ClientSession, config: Config, metrics: Metrics
) -> list[dict]:
    app = create_app(config, build_policy_set(config), StaticClusterView(), None, list, metrics)
    answers = []
    async with serving(app, server_context(bundle)) as running:
        for uid in ("first", "second"):  # the second is answered from the memo
            status, answer = await post_review(
                session, f"{running.url}/mutate/pods", _with_uid(CPU_POD, uid)
            )
            assert status == 200
            answers.append(answer["response"])
    return answers


async def test_audit_mode_answers_without_a_patch_and_with_the_record(bundle, session):
    config = Config.model_validate({"policies": {"gpu-visibility": {"mode": "audit"}}})
    metrics = Metrics(process_metrics=False)
    answers = await _serve_and_post(bundle, session, config, metrics)
    for response in answers:
        assert response["allowed"] is True
        assert "patch" not in response
        would = response["auditAnnotations"]["gpu-visibility"]
        assert would.startswith("would change: ")
        assert "NVIDIA_VISIBLE_DEVICES=none" in would
        assert "warnings" not in response
    assert [r["uid"] for r in answers] == ["first", "second"]
    assert _counted(metrics, "gpu-visibility", "audit", "recorded") == 2


async def test_enforce_mode_changes_the_pod_and_counts_the_change(bundle, session):
    metrics = Metrics(process_metrics=False)
    answers = await _serve_and_post(bundle, session, Config(), metrics)
    for response in answers:
        assert response["patchType"] == "JSONPatch"
        assert "auditAnnotations" not in response
    assert _counted(metrics, "gpu-visibility", "enforce", "changed") == 2
    assert _counted(metrics, "gpu-visibility", "audit", "recorded") == 0


def test_the_fixture_pod_is_cpu_only():
    review = json.loads(CPU_POD)
    containers = copy.deepcopy(review["request"]["object"]["spec"]["containers"])
    assert all("nvidia.com/gpu" not in json.dumps(c.get("resources", {})) for c in containers)
