"""Pods of one template get one computed answer: what may be shared, and what must not be."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import aiohttp
import pytest

from gpu_admission.cluster.view import NodeInfo, SecretInfo
from gpu_admission.config.model import Config
from tests.webhooks.server_helpers import (
    FIXTURES,
    MutableView,
    client_context,
    fixture,
    issue_localhost_bundle,
    post_review,
    server_context,
    serving,
)
from webhooks.core import review as review_module
from webhooks.core.review import parse_review
from webhooks.dispatch.chain import Outcome
from webhooks.dispatch.registry import build_policy_set
from webhooks.service.memo import MutationMemo, probed_request
from webhooks.service.server import create_app

TOKEN_VOLUME = "kube-api-access-x7k2q"


def replica(suffix: str, review: dict[str, Any] | None = None) -> dict[str, Any]:
    """One pod of the Deployment fixture, as the ReplicaSet would send the next one: its own
    request uid, token volume suffix and managedFields time."""
    review = copy.deepcopy(review or fixture("pod-from-deployment.mutating.json"))
    text = json.dumps(review)
    names = {
        v["name"]
        for v in review["request"]["object"]["spec"]["volumes"]
        if v["name"].startswith("kube-api-access-")
    }
    for name in names:
        text = text.replace(name, f"kube-api-access-{suffix}")
    review = json.loads(text)
    review["request"]["uid"] = f"uid-{suffix}"
    for entry in review["request"]["object"]["metadata"].get("managedFields") or []:
        entry["time"] = f"2026-11-22T10:00:{suffix[-2:]}Z"
    return review


def _body(review: dict[str, Any]) -> bytes:
    return json.dumps(review).encode()


def key(memo: MutationMemo, body: bytes, view: MutableView) -> Any:
    probe = memo.probe(body, view)
    assert probe is not None
    return probe.key


def test_two_replicas_share_a_key_and_another_namespace_or_view_does_not() -> None:
    memo, view = MutationMemo(), MutableView()
    first, second = _body(replica("aaaa1")), _body(replica("bbbb2"))
    assert first != second and key(memo, first, view) == key(memo, second, view)
    elsewhere = replica("bbbb2")
    elsewhere["request"]["namespace"] = "team-b"
    assert key(memo, _body(elsewhere), view) != key(memo, first, view)
    before = key(memo, first, view)
    view.node_records["gpu-1"] = NodeInfo("gpu-1", {}, {})
    assert key(memo, first, view) != before  # any change of the view
    other_profile = replica("cccc3")
    annotations = other_profile["request"]["object"]["metadata"]["annotations"]
    annotations["gpu-admission.io/gpu-app"] = "jax"
    assert key(memo, _body(other_profile), view) != key(memo, first, view)


def test_only_made_up_keys_are_blanked_never_string_contents() -> None:
    memo, view = MutationMemo(), MutableView()
    review = replica("aaaa1")
    env = [{"name": "NOTE", "value": 'a "uid":"x" inside a value'}]
    review["request"]["object"]["spec"]["containers"][0]["env"] = env
    changed = copy.deepcopy(review)
    changed["request"]["object"]["spec"]["containers"][0]["env"][0]["value"] = 'a "uid":"y"'
    assert key(memo, _body(review), view) != key(memo, _body(changed), view)


def test_outcomes_that_cannot_be_repeated_are_not_kept() -> None:
    memo = MutationMemo()
    memo.put("failed", Outcome(failed_policies=["gpu-memory-share"]), b"")
    token_op = {"op": "add", "path": "/spec/volumes/-", "value": {"name": TOKEN_VOLUME}}
    memo.put("names-the-token", Outcome(ops=[token_op]), b"")
    memo.put("denied", Outcome(allowed=False, message="no"), b"")
    memo.put("fine", Outcome(ops=[{"op": "add", "path": "/x", "value": 1}]), b"tail")
    assert memo.get("failed") is None and memo.get("names-the-token") is None
    assert memo.get("denied") is None
    assert memo.get("fine") is not None and len(memo) == 1


def test_the_memo_keeps_the_last_templates_only() -> None:
    memo = MutationMemo(max_entries=2)
    for key in ("a", "b", "c"):
        memo.put(key, Outcome(), b"t")
    assert memo.get("a") is None and memo.get("c") is not None


@pytest.fixture(scope="module")
def bundle():
    return issue_localhost_bundle()


async def test_the_service_answers_the_next_replica_from_the_memo_identically(bundle) -> None:
    config = Config()
    view = MutableView()
    for name, replicas in (("two-way", "2"), ("four-way", "4")):
        view.node_records[name] = NodeInfo(
            name,
            {"nvidia.com/gpu.replicas": replicas, "nvidia.com/gpu.memory": "23028"},
            {"nvidia.com/gpu.shared": replicas},
        )
    app = create_app(config, build_policy_set(config), view, None, list)
    (endpoint,) = [
        route.handler.__self__
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical == "/mutate/pods"
    ]
    connector = aiohttp.TCPConnector(ssl=client_context(bundle))
    async with (
        serving(app, server_context(bundle)) as running,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        answers = []
        for suffix in ("aaaa1", "bbbb2"):
            body = json.dumps(replica(suffix)).encode()
            status, answer = await post_review(session, f"{running.url}/mutate/pods", body)
            assert status == 200
            answers.append(answer["response"])
        assert (endpoint.memo.misses, endpoint.memo.hits) == (1, 1)
        first, second = answers
        assert (first.pop("uid"), second.pop("uid")) == ("uid-aaaa1", "uid-bbbb2")
        assert first == second and first["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(first["patch"]))
        written = {e["name"] for op in ops if op["path"].endswith("/env") for e in op["value"]}
        assert "GPU_MEMORY_FRACTION" in written  # the memory share
        # A Secret appearing in the view (here: any record) means computing afresh.
        view.secrets[("ml", "s")] = SecretInfo("ml", "s", "aws-credential")
        body = json.dumps(replica("cccc3")).encode()
        await post_review(session, f"{running.url}/mutate/pods", body)
        assert endpoint.memo.misses == 2
        # The envelope is checked in full on the way to the memo: an empty uid, or another
        # apiVersion, is refused as it would be without it.
        for change in (
            lambda r: r["request"].update(uid=""),
            lambda r: r.update(apiVersion="admission.k8s.io/v1beta1"),
        ):
            bad = replica("dddd4")
            change(bad)
            status, answer = await post_review(
                session, f"{running.url}/mutate/pods", json.dumps(bad).encode()
            )
            assert status == 400, answer


@pytest.mark.parametrize(
    "key",
    [
        "batch.kubernetes.io/job-completion-index",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
    ],
)
def test_pods_with_an_identity_of_their_own_are_never_memoised(key: str) -> None:
    review = replica("aaaa1")
    review["request"]["object"]["metadata"]["labels"][key] = "3"
    assert MutationMemo.never_repeats(_body(review))
    assert not MutationMemo.never_repeats(_body(replica("aaaa1")))
    # managedFields name the same keys as `f:<key>`: not an identity.
    review = replica("aaaa1")
    review["request"]["object"]["metadata"]["managedFields"][0]["fieldsV1"] = {
        "f:metadata": {"f:labels": {f"f:{key}": {}}}
    }
    assert not MutationMemo.never_repeats(_body(review))


async def test_an_indexed_job_pod_is_answered_without_touching_the_memo(bundle) -> None:
    config = Config()
    app = create_app(config, build_policy_set(config), MutableView(), None, list)
    (endpoint,) = [
        route.handler.__self__
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical == "/mutate/pods"
    ]
    connector = aiohttp.TCPConnector(ssl=client_context(bundle))
    async with (
        serving(app, server_context(bundle)) as running,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        answers = []
        for index in ("0", "1"):
            review = replica("aaaa1")
            labels = review["request"]["object"]["metadata"]["labels"]
            labels["batch.kubernetes.io/job-completion-index"] = index
            status, answer = await post_review(session, f"{running.url}/mutate/pods", _body(review))
            assert status == 200
            answers.append(answer["response"])
    assert (endpoint.memo.misses, endpoint.memo.hits, len(endpoint.memo)) == (0, 0, 0)
    assert answers[0] == answers[1] and answers[0]["allowed"] is True


REAL_REVIEWS = sorted(
    p.name
    for p in FIXTURES.glob("*.mutating.json")
    # Pod CREATEs: the reviews the memo serves (an UPDATE's probe fails, and it is parsed once,
    # in full).
    if (request := json.loads(p.read_text())["request"])["kind"]["kind"] == "Pod"
    and request["operation"] == "CREATE"
)


@pytest.mark.parametrize("name", REAL_REVIEWS)
def test_a_probed_review_makes_the_request_a_full_parse_makes(name: str) -> None:
    """What kube-apiserver sent: the request made from the probe's one decode holds what the
    policies read (the envelope, the metadata and spec) as the full parse of the body does."""
    body = (FIXTURES / name).read_bytes()
    probe = MutationMemo.probe(body, MutableView())
    assert probe is not None
    probed, parsed = probed_request(probe, "Pod"), parse_review(body, "Pod")
    assert probed.object["spec"] == parsed.object["spec"]
    read = ("name", "generateName", "namespace", "labels", "annotations", "ownerReferences")
    for field in read:
        assert probed.object["metadata"].get(field) == parsed.object["metadata"].get(field)
    for field in ("uid", "kind", "resource", "sub_resource", "operation", "namespace", "name"):
        assert getattr(probed, field) == getattr(parsed, field)
    assert (probed.old_object, probed.dry_run, probed.username) == (
        parsed.old_object,
        parsed.dry_run,
        parsed.username,
    )


async def test_a_miss_decodes_the_review_once(bundle, monkeypatch) -> None:
    """The body is decoded by the memo's probe, and not again for the policies."""
    full_decodes = []
    decoder = review_module._DECODER

    class Counting:
        def decode(self, body: bytes) -> Any:
            full_decodes.append(len(body))
            return decoder.decode(body)

    monkeypatch.setattr(review_module, "_DECODER", Counting())
    config = Config()
    app = create_app(config, build_policy_set(config), MutableView(), None, list)
    connector = aiohttp.TCPConnector(ssl=client_context(bundle))
    async with (
        serving(app, server_context(bundle)) as running,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        body = json.dumps(replica("aaaa1")).encode()
        status, answer = await post_review(session, f"{running.url}/mutate/pods", body)
        assert status == 200 and answer["response"]["allowed"]
        assert full_decodes == []
        # A pod the memo never keeps is parsed in full, once.
        indexed = replica("bbbb2")
        indexed["request"]["object"]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "0"
        body = json.dumps(indexed).encode()
        status, _ = await post_review(session, f"{running.url}/mutate/pods", body)
        assert status == 200 and full_decodes == [len(body)]
