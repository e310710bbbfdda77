"""The admission service over real HTTPS: real captured reviews in, AdmissionReview answers out."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import jsonpatch
import pytest

from certs.issue import CertBundle
from gpu_admission.cluster.view import (
    ClusterView,
    MissResolver,
    ObjectRef,
    ServiceAccountInfo,
    StaticClusterView,
)
from gpu_admission.config.model import Config
from gpu_admission.process.http_probes import create_metrics_app
from gpu_admission.process.metrics import Metrics
from tests.webhooks.server_helpers import (
    FillingResolver,
    MutableView,
    annotate,
    client_context,
    decode_patch,
    env_everywhere,
    fixture,
    fixture_bytes,
    post_review,
    server_context,
    serving,
)
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.interface import MutatingPolicy, PolicySet, Scope, ValidatingPolicy
from webhooks.service.server import create_app

MAX_BODY = 64 * 1024
SEEN = "test.example/seen"


def raising(kind: str = "Pod", mutating: bool = True) -> MutatingPolicy | ValidatingPolicy:
    def fail(*args: Any) -> Verdict:
        raise RuntimeError("unexpected internal state")

    if mutating:
        return MutatingPolicy("exploding", Scope(kind), fail)
    return ValidatingPolicy("exploding", Scope(kind, frozenset({"CREATE", "UPDATE"})), fail)


def deny_namespace(namespace: str) -> ValidatingPolicy:
    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        if request.namespace == namespace:
            return Verdict.deny(f"pods may not run in {namespace}; use another namespace")
        return Verdict.allow("checked by the namespace test policy")

    return ValidatingPolicy("namespace", Scope("Pod"), validate)


def make_config(**server: Any) -> Config:
    return Config.model_validate({"server": {"max_body_bytes": MAX_BODY, **server}})


@pytest.fixture
def start(bundle: CertBundle) -> Callable[..., Any]:
    @asynccontextmanager
    async def starter(
        policy_set: PolicySet | None = None,
        *,
        config: Config | None = None,
        view: ClusterView | None = None,
        resolver: MissResolver | None = None,
        readiness: Callable[[], list[str]] = list,
        metrics: Metrics | None = None,
    ) -> AsyncIterator[str]:
        app = create_app(
            config or make_config(),
            policy_set or PolicySet(),
            view or StaticClusterView(),
            resolver,
            readiness,
            metrics,
        )
        async with serving(app, server_context(bundle)) as running:
            yield running.url

    return starter


# -- answers to real reviews --------------------------------------------------------------------


async def test_mutating_review_gets_one_patch_composed_from_every_policy(start, session):
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")
    sent = json.loads(body)
    policies = PolicySet(mutating=(annotate(SEEN, "yes"), env_everywhere("TEST_FLAG", "1")))
    async with start(policies) as url:
        status, answer = await post_review(session, f"{url}/mutate/pods", body)
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert "status" not in response
    patched = jsonpatch.apply_patch(
        copy.deepcopy(sent["request"]["object"]), decode_patch(response)
    )
    assert patched["metadata"]["annotations"][SEEN] == "yes"
    assert patched["spec"]["containers"][0]["env"] == [{"name": "TEST_FLAG", "value": "1"}]


async def test_reinvocation_on_the_patched_object_answers_without_a_patch(start, session):
    sent = fixture("pod-cpu-cuda-image.mutating.json")
    policies = PolicySet(mutating=(annotate(SEEN, "yes"), env_everywhere("TEST_FLAG", "1")))
    async with start(policies) as url:
        _, first = await post_review(session, f"{url}/mutate/pods", json.dumps(sent).encode())
        again = copy.deepcopy(sent)
        again["request"]["object"] = jsonpatch.apply_patch(
            sent["request"]["object"], decode_patch(first["response"])
        )
        _, second = await post_review(session, f"{url}/mutate/pods", json.dumps(again).encode())
    assert second["response"] == {"uid": sent["request"]["uid"], "allowed": True}


async def test_generated_name_pod_from_a_controller_is_reviewed(start, session):
    body = fixture_bytes("pod-from-deployment.mutating.json")
    async with start(PolicySet(mutating=(annotate(SEEN, "yes"),))) as url:
        status, answer = await post_review(session, f"{url}/mutate/pods", body)
    assert status == 200
    ops = decode_patch(answer["response"])
    assert {"op": "add", "path": f"/metadata/annotations/{SEEN.replace('/', '~1')}"} in [
        {k: op[k] for k in ("op", "path")} for op in ops
    ]


async def test_validating_review_without_changes_has_no_patch_fields(start, session):
    body = fixture_bytes("pod-gpu.validating.json")
    async with start(PolicySet(mutating=(annotate(SEEN, "yes"),))) as url:
        status, answer = await post_review(session, f"{url}/validate/pods", body)
    assert status == 200
    assert answer["response"] == {"uid": json.loads(body)["request"]["uid"], "allowed": True}


async def test_validating_warnings_are_returned(start, session):
    body = fixture_bytes("pod-gpu.validating.json")
    async with start(PolicySet(validating=(deny_namespace("elsewhere"),))) as url:
        _, answer = await post_review(session, f"{url}/validate/pods", body)
    assert answer["response"]["allowed"] is True
    assert answer["response"]["warnings"] == ["checked by the namespace test policy"]


async def test_denial_carries_code_and_message_and_is_logged(start, session, caplog):
    body = fixture_bytes("pod-gpu.validating.json")
    caplog.set_level(logging.INFO, logger="webhooks.service.server")
    async with start(PolicySet(validating=(deny_namespace("ml"),))) as url:
        status, answer = await post_review(session, f"{url}/validate/pods", body)
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "message": "pods may not run in ml; use another namespace",
    }
    assert "patch" not in response and "patchType" not in response
    [record] = [r for r in caplog.records if r.getMessage() == "admission denied"]
    assert record.webhook == "/validate/pods"
    assert record.namespace == "ml" and record.object_name == "train-resnet"
    assert record.denial == "pods may not run in ml; use another namespace"


async def test_secret_values_never_reach_the_log(start, session, caplog):
    body = fixture_bytes("secret-aws-data.validating.json")
    secret_data = json.loads(body)["request"]["object"]["data"]

    def deny_all(request: AdmissionRequest, view: ClusterView) -> Verdict:
        return Verdict.deny("credential Secrets are frozen; ask your platform team")

    policies = PolicySet(
        validating=(ValidatingPolicy("freeze", Scope("Secret"), deny_all), raising("Secret", False))
    )
    caplog.set_level(logging.DEBUG)
    async with start(policies) as url:
        status, answer = await post_review(session, f"{url}/validate/secrets", body)
    assert status == 200 and answer["response"]["allowed"] is False
    logged = "\n".join(r.getMessage() + repr(vars(r)) for r in caplog.records)
    assert "admission refused: a policy failed" in logged
    for value in secret_data.values():
        assert value not in logged


async def test_pvc_paths_review_persistent_volume_claims(start, session):
    def label(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        patch.set_label("test.example/dataset", "true")

    policies = PolicySet(mutating=(MutatingPolicy("label", Scope("PersistentVolumeClaim"), label),))
    async with start(policies) as url:
        _, mutated = await post_review(
            session,
            f"{url}/mutate/persistentvolumeclaims",
            fixture_bytes("pvc-dataset.mutating.json"),
        )
        _, validated = await post_review(
            session,
            f"{url}/validate/persistentvolumeclaims",
            fixture_bytes("pvc-dataset.validating.json"),
        )
    assert decode_patch(mutated["response"])[-1]["value"] == "true"
    assert validated["response"]["allowed"] is True


async def test_cache_misses_are_resolved_before_policies_run(start, session):
    view = MutableView()
    trainer = ObjectRef("ServiceAccount", "ml", "default")

    def fill() -> None:
        view.service_accounts[("ml", "default")] = ServiceAccountInfo(
            "ml", "default", {"test.example/team": "vision"}
        )

    resolver = FillingResolver(view, {trainer: fill})

    def copy_team(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        account = view.service_account(request.namespace, "default")
        patch.set_annotation("test.example/team", account.annotations["test.example/team"])

    policy = MutatingPolicy(
        "team", Scope("Pod"), copy_team, references=lambda request, view: [trainer]
    )
    async with start(PolicySet(mutating=(policy,)), view=view, resolver=resolver) as url:
        _, answer = await post_review(
            session, f"{url}/mutate/pods", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
    assert resolver.asked == [trainer]
    assert decode_patch(answer["response"])[-1]["value"] == "vision"


# -- bad requests -------------------------------------------------------------------------------


def _review_with(change: Callable[[dict[str, Any]], None]) -> bytes:
    review = fixture("pod-cpu-cuda-image.mutating.json")
    change(review)
    return json.dumps(review).encode()


BAD_REVIEWS = {
    "not json": (b"{not json", "not valid JSON"),
    "not a review": (b"[1, 2, 3]", "not an AdmissionReview"),
    "wrong apiVersion": (
        _review_with(lambda r: r.update(apiVersion="admission.k8s.io/v1beta1")),
        "apiVersion must be 'admission.k8s.io/v1'",
    ),
    "no uid": (_review_with(lambda r: r["request"].pop("uid")), "request.uid"),
    "no object": (_review_with(lambda r: r["request"].pop("object")), "request.object is missing"),
    "wrong kind": (
        fixture_bytes("secret-aws-data.validating.json"),
        "this endpoint reviews Pod objects, got Secret",
    ),
}


@pytest.mark.parametrize("case", BAD_REVIEWS, ids=list(BAD_REVIEWS))
async def test_unusable_reviews_get_400_saying_what_is_wrong(start, session, case):
    body, expected = BAD_REVIEWS[case]
    async with start() as url:
        status, answer = await post_review(session, f"{url}/mutate/pods", body)
    assert status == 400
    assert expected in answer["error"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda r: r["request"]["object"]["spec"]["containers"][0].update(env="A=1"),
            "request.object.spec.containers[0].env: expected a list",
        ),
        (
            lambda r: r["request"]["object"]["spec"].update(containers={"name": "x"}),
            "request.object.spec.containers: expected a list",
        ),
    ],
)
async def test_an_object_of_no_kubernetes_shape_is_bad_input_not_a_policy_error(
    start, session, caplog, change, path
):
    """A real API server never sends these; a direct caller can. 400 with the path, one log
    line, counted as a bad request: every real policy stays out of it."""
    from webhooks.dispatch.registry import build_policy_set

    metrics = Metrics(process_metrics=False)
    caplog.set_level(logging.INFO)
    async with start(build_policy_set(make_config()), metrics=metrics) as url:
        status, answer = await post_review(session, f"{url}/mutate/pods", _review_with(change))
    assert status == 400
    assert answer == {"error": f"not a valid AdmissionReview: {path}"}
    exposition = metrics.exposition().decode()
    assert (
        'gpu_admission_admission_bad_requests_total{reason="invalid_review",'
        'webhook="/mutate/pods"} 1.0' in exposition
    )
    assert "gpu_admission_admission_policy_errors_total{" not in exposition
    records = [r for r in caplog.records if r.name.startswith("webhooks")]
    assert len(records) == 1 and records[0].exc_info is None  # one line, no traceback


async def test_body_over_the_limit_by_content_length_gets_413(start, session):
    async with start() as url:
        async with session.post(
            f"{url}/mutate/pods",
            data=b"x" * (MAX_BODY + 1),
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 413
            assert "65536-byte limit" in (await response.json())["error"]
        # The service still answers on a new connection.
        status, _ = await post_review(
            session, f"{url}/mutate/pods", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
        assert status == 200


async def test_announced_oversize_body_is_refused_before_it_is_sent(start, bundle):
    # Only the headers are sent: the answer must come from Content-Length alone.
    async with start() as url:
        host, port = url.removeprefix("https://").split(":")
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=client_context(bundle), server_hostname="localhost"
        )
        writer.write(
            b"POST /mutate/pods HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=10)
        writer.close()
        await writer.wait_closed()
    assert status_line.startswith(b"HTTP/1.1 413")


async def test_chunked_body_over_the_limit_gets_413(start, session):
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_BODY // 1024 + 2):
            yield b" " * 1024

    async with (
        start() as url,
        session.post(
            f"{url}/mutate/pods", data=chunks(), headers={"Content-Type": "application/json"}
        ) as response,
    ):
        assert response.request_info.headers.get("Transfer-Encoding") == "chunked"
        assert response.status == 413


async def test_chunked_body_within_the_limit_is_reviewed(start, session):
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")

    async def chunks() -> AsyncIterator[bytes]:
        for start_at in range(0, len(body), 1000):
            yield body[start_at : start_at + 1000]

    async with (
        start() as url,
        session.post(
            f"{url}/mutate/pods", data=chunks(), headers={"Content-Type": "application/json"}
        ) as response,
    ):
        assert response.status == 200
        assert (await response.json())["response"]["allowed"] is True


async def test_wrong_method_gets_405_with_allow(start, session):
    async with start() as url, session.get(f"{url}/mutate/pods") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"
        assert "accepts POST only" in (await response.json())["error"]


async def test_unknown_path_gets_404_listing_the_webhooks(start, session):
    async with start() as url:
        status, answer = await post_review(
            session, f"{url}/mutate/deployments", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
    assert status == 404
    assert "/mutate/pods" in answer["error"]


async def test_other_content_types_get_415_and_charset_is_accepted(start, session):
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")
    async with start() as url:
        async with session.post(
            f"{url}/mutate/pods", data=body, headers={"Content-Type": "text/plain"}
        ) as response:
            assert response.status == 415
            assert "application/json" in (await response.json())["error"]
        async with session.post(
            f"{url}/mutate/pods",
            data=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
        ) as response:
            assert response.status == 200


# -- failing policies ---------------------------------------------------------------------------


async def test_failing_policy_denies_under_deny_mode_and_keeps_serving(start, session, caplog):
    metrics = Metrics(process_metrics=False)
    policies = PolicySet(mutating=(annotate(SEEN, "yes"), raising()))
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")
    caplog.set_level(logging.INFO)
    async with start(policies, metrics=metrics) as url:
        status, answer = await post_review(session, f"{url}/mutate/pods", body)
        again, _ = await post_review(session, f"{url}/mutate/pods", body)
    assert status == 200 and again == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "exploding" in response["status"]["message"]
    assert "retry" in response["status"]["message"]
    assert "patch" not in response
    exposition = metrics.exposition().decode()
    assert (
        'gpu_admission_admission_policy_errors_total{policy="exploding",webhook="/mutate/pods"} 2.0'
        in exposition
    )
    assert (
        'gpu_admission_admission_requests_total{operation="CREATE",verdict="error",'
        'webhook="/mutate/pods"} 2.0' in exposition
    )
    failures = [r for r in caplog.records if r.getMessage() == "admission refused: a policy failed"]
    assert len(failures) == 2 and failures[0].failed_policies == ["exploding"]


async def test_failing_policy_is_skipped_with_a_warning_under_allow_mode(start, session):
    metrics = Metrics(process_metrics=False)
    config = make_config(failure_modes={"/mutate/pods": "allow"})
    # The failing policy runs between two that patch: its half-done work must not leak, and the
    # patch must still apply to the object as sent.
    policies = PolicySet(
        mutating=(annotate(SEEN, "yes"), raising(), env_everywhere("TEST_FLAG", "1"))
    )
    sent = fixture("pod-cpu-cuda-image.mutating.json")
    async with start(policies, config=config, metrics=metrics) as url:
        _, answer = await post_review(session, f"{url}/mutate/pods", json.dumps(sent).encode())
    response = answer["response"]
    assert response["allowed"] is True
    assert any("exploding was skipped" in w for w in response["warnings"])
    patched = jsonpatch.apply_patch(sent["request"]["object"], decode_patch(response))
    assert patched["metadata"]["annotations"][SEEN] == "yes"
    assert patched["spec"]["containers"][0]["env"] == [{"name": "TEST_FLAG", "value": "1"}]
    exposition = metrics.exposition().decode()
    assert 'policy_errors_total{policy="exploding",webhook="/mutate/pods"} 1.0' in exposition
    assert 'requests_total{operation="CREATE",verdict="allowed",webhook="/mutate/pods"} 1.0' in (
        exposition
    )


# -- health, readiness, metrics -----------------------------------------------------------------


async def test_healthz_always_ok_and_readyz_waits_for_readiness(start, session):
    waiting = ["certificates", "informers"]
    async with start(readiness=lambda: list(waiting)) as url:
        async with session.get(f"{url}/healthz") as response:
            assert response.status == 200
        async with session.get(f"{url}/readyz") as response:
            assert response.status == 503
            assert (await response.json())["waiting_for"] == ["certificates", "informers"]
        waiting.clear()
        async with session.get(f"{url}/readyz") as response:
            assert response.status == 200
        async with session.post(f"{url}/readyz") as response:
            assert response.status == 405


async def test_metrics_endpoint_reports_requests(start, session):
    metrics = Metrics()
    async with (
        start(PolicySet(mutating=(annotate(SEEN, "yes"),)), metrics=metrics) as url,
        serving(create_metrics_app(metrics), None) as metrics_server,
    ):
        await post_review(
            session, f"{url}/mutate/pods", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
        await post_review(session, f"{url}/mutate/pods", b"nope")
        async with aiohttp.ClientSession() as plain:
            async with plain.get(f"{metrics_server.url}/metrics") as response:
                assert response.status == 200
                assert response.content_type == "text/plain"
                text = await response.text()
            async with plain.get(f"{metrics_server.url}/other") as response:
                assert response.status == 404
    assert (
        'gpu_admission_admission_requests_total{operation="CREATE",verdict="allowed",'
        'webhook="/mutate/pods"} 1.0' in text
    )
    assert 'gpu_admission_admission_patch_operations_total{webhook="/mutate/pods"} 2.0' in text
    assert (
        'gpu_admission_admission_bad_requests_total{reason="invalid_review",'
        'webhook="/mutate/pods"} 1.0' in text
    )
    assert 'gpu_admission_admission_duration_seconds_count{webhook="/mutate/pods"} 2.0' in text
    assert "process_resident_memory_bytes" in text or "python_info" in text


class UnreachableResolver:
    async def resolve(self, refs: Any) -> None:
        raise RuntimeError("ServiceAccount ml/default: HTTP 503 from the API server")


def needs_account() -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        patch.set_annotation(SEEN, "yes")

    return MutatingPolicy(
        "needs account",
        Scope("Pod"),
        mutate,
        references=lambda request, view: [
            ObjectRef("ServiceAccount", request.namespace, "default")
        ],
    )


async def test_failed_lookup_refuses_under_deny_mode(start, session):
    metrics = Metrics(process_metrics=False)
    async with start(
        PolicySet(mutating=(needs_account(),)), resolver=UnreachableResolver(), metrics=metrics
    ) as url:
        _, answer = await post_review(
            session, f"{url}/mutate/pods", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "could not look up" in response["status"]["message"]
    assert "ServiceAccount ml/default" in response["status"]["message"]
    assert 'lookup_failures_total{webhook="/mutate/pods"} 1.0' in metrics.exposition().decode()


async def test_failed_lookup_runs_the_policies_with_a_warning_under_allow_mode(start, session):
    config = make_config(failure_modes={"/mutate/pods": "allow"})
    async with start(
        PolicySet(mutating=(needs_account(),)), resolver=UnreachableResolver(), config=config
    ) as url:
        _, answer = await post_review(
            session, f"{url}/mutate/pods", fixture_bytes("pod-cpu-cuda-image.mutating.json")
        )
    response = answer["response"]
    assert response["allowed"] is True
    assert decode_patch(response)[-1]["value"] == "yes"
    assert any("could not be looked up" in w for w in response["warnings"])


def _workload_review(
    kind: str, group: str, obj: dict[str, Any], operation: str = "CREATE"
) -> bytes:
    version = obj["apiVersion"].rpartition("/")[2]
    request = {
        "uid": "workload-uid",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": operation,
        "namespace": "ml",
        "name": obj["metadata"]["name"],
        "object": obj,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


async def test_the_workloads_path_reviews_every_workload_kind(start, session):
    """One endpoint for Deployments, Jobs, JobSets, ...: the real policies' twins, warnings for
    what depends on the cluster, never a patch."""
    from webhooks.dispatch.registry import build_policy_set

    config = make_config()
    template = {
        "metadata": {"annotations": {"gpu-admission.io/cloud-credentials": "absent"}},
        "spec": {"containers": [{"name": "app", "image": "python"}]},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"template": template},
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": template}}}]},
    }
    async with start(build_policy_set(config), config=config) as url:
        for kind, group, obj in (
            ("Deployment", "apps", deployment),
            ("JobSet", "jobset.x-k8s.io", jobset),
        ):
            status, answer = await post_review(
                session, f"{url}/validate/workloads", _workload_review(kind, group, obj)
            )
            response = answer["response"]
            assert status == 200 and response["allowed"] is True, answer
            assert "patch" not in response
            [warning] = response["warnings"]
            assert warning.startswith(f'{kind} "{obj["metadata"]["name"]}')
            assert 'Secret "absent"' in warning


@pytest.mark.parametrize(
    ("kind", "group", "obj", "path"),
    [
        (
            "Deployment",
            "apps",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ml"},
                "spec": {"template": {"spec": {"containers": [{"name": "a", "env": "A=1"}]}}},
            },
            "request.object.spec.template.spec.containers[0].env: expected a list",
        ),
        (
            "JobSet",
            "jobset.x-k8s.io",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "train", "namespace": "ml"},
                "spec": {
                    "replicatedJobs": [
                        {"name": "ok", "template": {"spec": {"template": {"spec": {}}}}},
                        {
                            "name": "w",
                            "template": {"spec": {"template": {"spec": {"containers": {}}}}},
                        },
                    ]
                },
            },
            "request.object.spec.replicatedJobs[1].template.spec.template.spec.containers: "
            "expected a list",
        ),
    ],
)
async def test_a_workload_template_of_no_kubernetes_shape_is_bad_input_not_a_policy_error(
    start, session, kind, group, obj, path
):
    """Templates are shape-checked as a pod is: 400 with the path, no policy runs on them."""
    from webhooks.dispatch.registry import build_policy_set

    config = make_config()
    metrics = Metrics(process_metrics=False)
    async with start(build_policy_set(config), config=config, metrics=metrics) as url:
        body = _workload_review(kind, group, obj)
        status, answer = await post_review(session, f"{url}/validate/workloads", body)
    assert status == 400
    assert answer == {"error": f"not a valid AdmissionReview: {path}"}
    assert "gpu_admission_admission_policy_errors_total{" not in metrics.exposition().decode()
